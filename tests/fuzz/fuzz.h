/* fuzz.h: shared helpers for the libFuzzer targets (tests/fuzz/fuzz-*.c, `make fuzz`).
 *
 * Parsers of outside data that read files get the input written to a file in a private
 * scratch directory (on tmpfs when /dev/shm exists). Every target must survive any input:
 * a crash, a sanitizer report or a failed property check (abort) is a finding.
 */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir[256];

/* The scratch directory, created once per process. */
static const char *fz_scratch(void) {
    if (!fz_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fz_dir, sizeof fz_dir, "%s/k3fuzz.%d", base, (int)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", fz_dir);
        if (system(cmd) != 0)
            abort();
    }
    return fz_dir;
}

/* Write data to scratch/name; returns the full path (static buffer). */
static const char *fz_write(const char *name, const uint8_t *data, size_t size) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fz_scratch(), name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    return path;
}

#define FZ_CHECK(x)                                                                                \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", #x, __FILE__, __LINE__);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
