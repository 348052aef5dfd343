/* calibrate.c - the ranges of a model's tensors over calibration data, for
 * static quantisation (quantize.c). The tensors to measure become outputs
 * of the model for the calibration runs. Min/max needs one pass over the
 * data; percentile and entropy a second one, which fills a histogram of
 * each tensor over the range the first pass found. */
#include "engine/calibrate.h"

#include "base/error.h"
#include "engine/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BINS 2048 /* signed, over [-amax, amax] */
/* Values a tensor needs for its entropy threshold: 16 per bin of |x|. */
#define MIN_ENTROPY_VALUES (16.0 * BINS / 2)

bool gs_calib_method_from_name(const char *name, gs_calib_method *out) {
  static const char *const names[] = {"minmax", "percentile", "entropy"};
  for (int i = 0; i < 3; i++)
    if (strcmp(name, names[i]) == 0) {
      *out = (gs_calib_method)i;
      return true;
    }
  return false;
}

typedef struct tensor_stats {
  float lo, hi;
  double *hist; /* BINS, pass two */
} tensor_stats;

/* The model with the computed tensors added to its outputs (float32,
 * shape left to the plan); out_index[t]: tensor t's output, -1 for the
 * model's inputs, which the calibration data shows as they are. */
static int add_outputs(gs_model *m, const gs_calib_job *job, int *out_index) {
  gs_value_info *grown = realloc(m->outputs, sizeof *grown * (size_t)(m->n_outputs + job->n_tensors));
  if (!grown)
    return gs_error(GS_ENOMEM, "out of memory calibrating");
  m->outputs = grown;
  for (int t = 0; t < job->n_tensors; t++) {
    out_index[t] = -1;
    if (job->input_of[t] >= 0)
      continue;
    gs_value_info *v = &m->outputs[m->n_outputs];
    memset(v, 0, sizeof *v);
    v->dtype = GS_DT_FLOAT32;
    v->rank = -1;
    if (!(v->name = strdup(job->tensors[t])))
      return gs_error(GS_ENOMEM, "out of memory calibrating");
    out_index[t] = m->n_outputs++;
  }
  return 0;
}

static void observe(tensor_stats *s, const float *x, int64_t n, bool histogram) {
  if (!histogram) {
    for (int64_t i = 0; i < n; i++) {
      if (x[i] != x[i])
        continue; /* NaN tells nothing of the range */
      s->lo = x[i] < s->lo ? x[i] : s->lo;
      s->hi = x[i] > s->hi ? x[i] : s->hi;
    }
    return;
  }
  double amax = fmax(fabs((double)s->lo), fabs((double)s->hi));
  if (!(amax > 0) || !isfinite(amax))
    return;
  for (int64_t i = 0; i < n; i++) {
    if (x[i] != x[i])
      continue;
    double at = ((double)x[i] + amax) / (2 * amax) * BINS;
    int bin = at < 0 ? 0 : at >= BINS ? BINS - 1 : (int)at;
    s->hist[bin] += 1;
  }
}

static double histogram_count(const tensor_stats *s) {
  double total = 0;
  for (int b = 0; s->hist && b < BINS; b++)
    total += s->hist[b];
  return total;
}

/* The value below which a fraction `q` of the histogram lies. */
static float quantile(const tensor_stats *s, double q) {
  double total = 0, seen = 0;
  for (int b = 0; b < BINS; b++)
    total += s->hist[b];
  double amax = fmax(fabs((double)s->lo), fabs((double)s->hi));
  for (int b = 0; b < BINS; b++) {
    seen += s->hist[b];
    if (seen >= q * total)
      return (float)(-amax + (b + 1) * 2 * amax / BINS);
  }
  return s->hi;
}

/* KL(p || q) of two histograms of the same length, normalised here. */
static double kl_divergence(const double *p, const double *q, int n) {
  double sp = 0, sq = 0, kl = 0;
  for (int i = 0; i < n; i++) {
    sp += p[i];
    sq += q[i];
  }
  if (sp <= 0 || sq <= 0)
    return INFINITY;
  for (int i = 0; i < n; i++)
    if (p[i] > 0)
      kl += p[i] / sp * log((p[i] / sp) / (q[i] > 0 ? q[i] / sq : 1e-12));
  return kl;
}

/* TensorRT's entropy calibration on the histogram of |x|: the threshold
 * whose clipped distribution, squeezed into 128 levels, loses the least
 * information (KL divergence) against the unclipped one. */
static float entropy_threshold(const tensor_stats *s) {
  enum { HALF = BINS / 2, LEVELS = 128 };
  double absh[HALF], p[HALF], q[HALF];
  for (int b = 0; b < HALF; b++)
    absh[b] = s->hist[HALF + b] + s->hist[HALF - 1 - b];
  /* The bin of zero left out: the quantiser holds 0 exactly, and the spike
   * of zeros a Relu leaves would otherwise pull the threshold far down (a
   * half-normal clipped at 1.6 sigma instead of 4). */
  absh[0] = 0;
  double amax = fmax(fabs((double)s->lo), fabs((double)s->hi)), best = INFINITY;
  int best_i = HALF;
  for (int i = LEVELS; i <= HALF; i++) {
    double outliers = 0;
    for (int b = i; b < HALF; b++)
      outliers += absh[b];
    memcpy(p, absh, sizeof(double) * (size_t)i);
    p[i - 1] += outliers;
    /* Each of the LEVELS levels takes the mean of its bins, spread over the bins that were not empty. */
    for (int l = 0; l < LEVELS; l++) {
      int from = l * i / LEVELS, to = (l + 1) * i / LEVELS;
      double sum = 0;
      int used = 0;
      for (int b = from; b < to; b++) {
        sum += absh[b];
        used += absh[b] > 0;
      }
      for (int b = from; b < to; b++)
        q[b] = absh[b] > 0 ? sum / used : 0;
    }
    double kl = kl_divergence(p, q, i);
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return (float)((best_i + 0.5) * amax / HALF);
}

/* One pass over the calibration data in batches. */
static int pass(gs_model *m, const int *out_index, const gs_calib_job *job, tensor_stats *stats,
                bool histogram, int *runs) {
  int n_in = m->n_inputs, rc = 0;
  int64_t samples = job->calibration[0].shape.dims[0];
  int64_t batch = job->batch;
  gs_plan *plan = NULL;
  int64_t planned = -1;
  *runs = 0;
  void **outs = calloc((size_t)m->n_outputs, sizeof *outs);
  gs_plan_value_info *info = calloc((size_t)m->n_outputs, sizeof *info);
  if (!outs || !info)
    rc = gs_error(GS_ENOMEM, "out of memory calibrating");
  for (int64_t at = 0; rc == 0 && at < samples; at += batch) {
    int64_t rows = samples - at < batch ? samples - at : batch;
    if (job->fixed_batch && rows < batch)
      break; /* a model of a fixed batch takes whole batches only */
    gs_shape shapes[GS_CALIB_MAX_INPUTS];
    const void *ptrs[GS_CALIB_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
      const gs_npy *x = &job->calibration[i];
      shapes[i] = x->shape;
      shapes[i].dims[0] = rows;
      size_t row_bytes = x->bytes / (size_t)(x->shape.dims[0] ? x->shape.dims[0] : 1);
      ptrs[i] = (const char *)x->data + (size_t)at * row_bytes;
    }
    if (planned != rows) {
      gs_plan_destroy(plan);
      plan = NULL;
      gs_plan_options opt = {.device = job->device, .threads = job->threads};
      if ((rc = gs_plan_create(m, shapes, &opt, &plan)) < 0)
        break;
      planned = rows;
    }
    if ((rc = gs_plan_run_alloc(plan, ptrs, outs, info)) < 0)
      break;
    for (int t = 0; t < job->n_tensors; t++) {
      int in = job->input_of[t], o = out_index[t];
      if (in >= 0 && m->inputs[in].dtype == GS_DT_FLOAT32)
        observe(&stats[t], ptrs[in], gs_shape_numel(&shapes[in]), histogram);
      else if (o >= 0 && info[o].dtype == GS_DT_FLOAT32)
        observe(&stats[t], outs[o], (int64_t)(info[o].bytes / sizeof(float)), histogram);
    }
    for (int o = 0; o < m->n_outputs; o++) {
      free(outs[o]);
      outs[o] = NULL;
    }
    (*runs)++;
  }
  gs_plan_destroy(plan);
  free(outs);
  free(info);
  return rc;
}

int gs__calibrate(gs_model *m, const gs_calib_job *job, gs_calib_range *ranges, int *runs) {
  if (job->n_tensors < 1 || job->n_tensors > GS_CALIB_MAX_TENSORS ||
      m->n_outputs > GS_CALIB_MAX_INPUTS ||
      m->n_inputs > GS_CALIB_MAX_INPUTS)
    return gs_error(GS_ENOTSUP, "calibration measures at most %d tensors of a model of at most "
                                "%d inputs and outputs",
                    GS_CALIB_MAX_TENSORS, GS_CALIB_MAX_INPUTS);
  int *out_index = calloc((size_t)job->n_tensors, sizeof *out_index);
  tensor_stats *stats = calloc((size_t)job->n_tensors + 1, sizeof *stats);
  int rc = out_index && stats ? add_outputs(m, job, out_index)
                              : gs_error(GS_ENOMEM, "out of memory calibrating");
  if (rc == 0)
    rc = pass(m, out_index, job, stats, false, runs);
  bool histogram = job->method != GS_CALIB_MINMAX;
  for (int t = 0; rc == 0 && histogram && t < job->n_tensors; t++)
    if (!(stats[t].hist = calloc(BINS, sizeof(double))))
      rc = gs_error(GS_ENOMEM, "out of memory calibrating");
  if (rc == 0 && histogram)
    rc = pass(m, out_index, job, stats, true, runs);
  for (int t = 0; rc == 0 && t < job->n_tensors; t++) {
    tensor_stats *s = &stats[t];
    float lo = s->lo, hi = s->hi;
    if (job->method == GS_CALIB_PERCENTILE) {
      lo = quantile(s, 1e-5);
      hi = quantile(s, 1 - 1e-5);
    } else if (job->method == GS_CALIB_ENTROPY && histogram_count(s) >= MIN_ENTROPY_VALUES) {
      /* (Fewer values leave most bins empty, and the divergence then
       * favours thresholds far inside the range: min/max instead.) */
      float th = entropy_threshold(s);
      lo = s->lo > -th ? s->lo : -th;
      hi = s->hi < th ? s->hi : th;
    }
    /* The range holds 0, so that zero (padding, a Relu's floor) is exact. */
    ranges[t].lo = lo < 0 ? lo : 0;
    ranges[t].hi = hi > 0 ? hi : 0;
  }
  for (int t = 0; stats && t < job->n_tensors; t++)
    free(stats[t].hist);
  free(stats);
  free(out_index);
  return rc;
}
