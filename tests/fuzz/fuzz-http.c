/* fuzz-http.c: the server's checks of outside bytes: each input as a request head
 * (serve-http.c, http_head_check: passed on with its length, or refused with a status, code
 * and message), as text the server echoes or logs (http_clean: printable, no control
 * character, within its buffer), and as a chat-completion body (serve_check_body: served or
 * refused with a message). Never a crash. */
#include "serve.h"
#include "fuzz.h"
#include "serve-http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p        = (const char *)data;
    char        err[512] = "";
    if (serve_check_body(p, size, err, sizeof err) != 0)
        FZ_CHECK(err[0] != 0);
    http_rules r = {.keyless = (int)(size & 1), .allow_hosts = "a.test,b.test", .max_body = 1000};
    http_head  h;
    if (http_head_check(p, size, (int)(size & 2), &r, &h))
        FZ_CHECK(h.status ? h.status >= 400 && h.code[0] && h.msg[0] : h.len >= 4 && h.len <= size);
    char   clean[256];
    size_t n = http_clean(clean, sizeof clean, p, size);
    FZ_CHECK(n < sizeof clean && strlen(clean) == n);
    for (size_t i = 0; i < n; i++)
        FZ_CHECK((unsigned char)clean[i] >= 0x20 && clean[i] != 0x7F);
    return 0;
}
