/* fuzz-http.c: chat-completion request bodies through the server's own parser (HTTP framing
 * itself is libmicrohttpd's): every body is served or refused with a message, never a crash. */
#include "cli.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    if (serve_check_body((const char *)data, size, err, sizeof err) != 0)
        FZ_CHECK(err[0] != 0);
    return 0;
}
