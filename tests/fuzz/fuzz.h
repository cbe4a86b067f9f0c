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

static void fz_cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
}

/* The scratch directory, created once per process, removed at its exit. Its name has the same
 * length in every run (the process id in 10 digits): error messages quote these paths through
 * the escaping code, whose loop counts are coverage, so a name whose length went with the pid's
 * digits made a fixed-seed run (make check's) keep other inputs on another run. */
static const char *fz_scratch(void) {
    if (!fz_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fz_dir, sizeof fz_dir, "%s/k3fuzz.%010d", base, (int)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", fz_dir);
        if (system(cmd) != 0)
            abort();
        atexit(fz_cleanup);
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

/* Two files from one input: the bytes before the first NUL go to scratch/first, the bytes after
 * it to scratch/second; without a NUL, second is removed (the "file absent" case). */
static inline void fz_write_split(const char *first, const char *second, const uint8_t *data, size_t size) {
    size_t cut = size;
    for (size_t i = 0; i < size; i++)
        if (data[i] == 0) {
            cut = i;
            break;
        }
    fz_write(first, data, cut);
    if (cut < size)
        fz_write(second, data + cut + 1, size - cut - 1);
    else
        unlink(fz_write(second, data, 0));
}

#define FZ_CHECK(x)                                                                                          \
    do {                                                                                                     \
        if (!(x)) {                                                                                          \
            fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", #x, __FILE__, __LINE__);                   \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)
