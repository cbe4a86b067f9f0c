/* xdg.c: XDG base directories (see xdg.h). */
#include "xdg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int xdg_dir(const char *var, const char *fallback, const char *sub, int create, char *out, size_t n) {
    const char *x = getenv(var), *h = getenv("HOME");
    int         k;
    if (x && *x)
        k = snprintf(out, n, "%s/k3chat%s%s", x, *sub ? "/" : "", sub);
    else if (h && *h)
        k = snprintf(out, n, "%s/%s/k3chat%s%s", h, fallback, *sub ? "/" : "", sub);
    else
        return -1;
    if (k < 0 || (size_t)k >= n)
        return -1;
    if (!create)
        return 0;
    for (char *p = out + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(out, 0700);
            *p = '/';
        }
    return mkdir(out, 0700) == 0 || errno == EEXIST ? 0 : -1;
}
