/* fuzz-cmd.c: slash-command lines: cmd_parse accepts them or explains why, never crashes. */
#include "cmd.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char line[8192];
    if (size >= sizeof line)
        size = sizeof line - 1;
    memcpy(line, data, size);
    line[size] = 0;
    cmd_result r;
    if (cmd_parse(line, &r) != 0)
        FZ_CHECK(r.msg[0] != 0);
    return 0;
}
