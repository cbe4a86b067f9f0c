/* tool-opt.h: what the option loops of the command-line tools (k3-mkmodel, k3-repack) share.
 *
 * Both parse with getopt_long, set their switches through getopt's flag pointer and print a
 * usage(FILE *) of their own; tool_getopt answers the cases that are the same in every tool, so
 * each loop's switch holds only the tool's own options.
 */
#pragma once
#include <getopt.h>
#include <stdio.h>

/* The next of the tool's own options (getopt_long's value; optarg as getopt left it), or -1 at the
 * end of the options or when the tool must stop: -h/--help prints usage on stdout and sets *rc to
 * 0, an unknown option or a missing argument (getopt named it on stderr) prints usage on stderr
 * and sets *rc to 2. A switch (getopt set it through its flag pointer) is passed over. *rc is
 * left alone otherwise: start it at -1 and return it when it is >= 0 after the loop. */
static inline int tool_getopt(int argc, char **argv, const struct option *lo, void (*usage)(FILE *),
                              int *rc) {
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) == 0)
        ;
    if (c == 'h' || c == '?' || c == ':') {
        usage(c == 'h' ? stdout : stderr);
        *rc = c == 'h' ? 0 : 2;
        return -1;
    }
    return c;
}
