/* test_http_parse.c - the URL and header values the server's routes read
 * (src/api/http_parse.c). */
#include "harness.h"

#include "api/http_parse.h"

#include <string.h>

static void model_urls_split(void) {
  char name[16], version[8], action[8];
#define SPLIT(url) gs_http_model_url(url, name, sizeof name, version, sizeof version, action, \
                                     sizeof action)
  CHECK(SPLIT("/v2/models/digits"));
  CHECK_STR(name, "digits");
  CHECK_STR(version, "");
  CHECK_STR(action, "");
  CHECK(SPLIT("/v2/models/digits/versions/12/infer"));
  CHECK_STR(name, "digits");
  CHECK_STR(version, "12");
  CHECK_STR(action, "infer");
  CHECK(SPLIT("/v2/models/digits/ready"));
  CHECK_STR(action, "ready");
  CHECK(SPLIT("/v2/models/digits/"));
  CHECK_STR(action, "");
  CHECK(!SPLIT("/v2/models/"));                        /* no name */
  CHECK(!SPLIT("/v2/models//infer"));                  /* empty name */
  CHECK(!SPLIT("/v2/models/digits/versions/"));        /* empty version */
  CHECK(!SPLIT("/v2/models/digits/versions//infer"));
  CHECK(!SPLIT("/v2/models/digits/infer/more"));       /* an action holds no slash */
  CHECK(!SPLIT("/v2/models/a-name-longer-than-16"));   /* does not fit: refused, not cut */
  CHECK(!SPLIT("/v2/models/d/versions/123456789"));
  CHECK(!SPLIT("/v2/models/d/infer-too-long"));
  CHECK(!SPLIT("/v2/other/digits"));
#undef SPLIT
}

static void header_lengths(void) {
  size_t n = 7;
  CHECK(gs_http_header_length("0", &n) && n == 0);
  CHECK(gs_http_header_length("123", &n) && n == 123);
  CHECK(gs_http_header_length("18446744073709551615", &n) && n == (size_t)-1);
  CHECK(!gs_http_header_length("18446744073709551616", &n)); /* overflow */
  CHECK(!gs_http_header_length("-1", &n));
  CHECK(!gs_http_header_length("+1", &n));
  CHECK(!gs_http_header_length(" 1", &n));
  CHECK(!gs_http_header_length("1 ", &n));
  CHECK(!gs_http_header_length("12abc", &n));
  CHECK(!gs_http_header_length("", &n));
  CHECK(!gs_http_header_length(NULL, &n));
}

static void bearer_tokens(void) {
  CHECK_STR(gs_http_bearer_token("Bearer abc"), "abc");
  CHECK_STR(gs_http_bearer_token("bearer abc"), "abc");
  CHECK_STR(gs_http_bearer_token("Bearer "), "");
  CHECK(gs_http_bearer_token("Basic dXNlcjpwdw==") == NULL);
  CHECK(gs_http_bearer_token("Bearer") == NULL);
  CHECK(gs_http_bearer_token("") == NULL);
  CHECK(gs_http_bearer_token(NULL) == NULL);
}

static const gs_test tests[] = {
    {"model_urls_split", model_urls_split},
    {"header_lengths", header_lengths},
    {"bearer_tokens", bearer_tokens},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "http_parse", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}
