/* log.h - leveled logging to stderr. The level comes from GPUSRV_LOG
 * (error, warn, info, debug) and is read once, at the first message. */
#ifndef GS_BASE_LOG_H
#define GS_BASE_LOG_H

typedef enum { GS_LOG_ERROR, GS_LOG_WARN, GS_LOG_INFO, GS_LOG_DEBUG } gs_log_level;

void gs_log(gs_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* True when messages of `level` are printed. */
int gs_log_enabled(gs_log_level level);
/* Parses "error", "warn", "info" or "debug"; returns -1 for anything else. */
int gs_log_level_parse(const char *s);

#define GS_LOGE(comp, ...) gs_log(GS_LOG_ERROR, comp, __VA_ARGS__)
#define GS_LOGW(comp, ...) gs_log(GS_LOG_WARN, comp, __VA_ARGS__)
#define GS_LOGI(comp, ...) gs_log(GS_LOG_INFO, comp, __VA_ARGS__)
#define GS_LOGD(comp, ...) gs_log(GS_LOG_DEBUG, comp, __VA_ARGS__)

#endif
