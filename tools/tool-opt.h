/* tool-opt.h: what the option parsing of the command-line tools (k3-mkmodel, k3-repack, k3-ab)
 * shares.
 *
 * k3-mkmodel and k3-repack parse with getopt_long, set their switches through getopt's flag
 * pointer and print a usage(FILE *) of their own; tool_getopt answers the cases that are the
 * same in every tool, so each loop's switch holds only the tool's own options. tool_int and
 * tool_u64 read a number option whole (no atoi: "12x" or "" is an error naming the option).
 * Every message that quotes the command line (a value, an unknown option) goes through
 * txt_term_printf (ui/common/text.h), as do the tools' other messages that quote a path, a file's
 * or a model's text: an argument holding ESC ] 52 must not reach the terminal as a command.
 */
#pragma once
#include "text.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

/* The value s of option --name of tool as an integer in lo..hi: 0, or -1 after
 * "TOOL: --NAME 'S': expected an integer in LO..HI" on stderr. */
static inline int tool_int(const char *tool, const char *name, const char *s, long lo, long hi, int *out) {
    char *end;
    errno  = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        txt_term_printf(stderr, "%s: --%s '%s': expected an integer in %ld..%ld\n", tool, name, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* The same for a seed: any non-negative integer that fits 64 bits (decimal, or 0x hex). */
static inline int tool_u64(const char *tool, const char *name, const char *s, unsigned long long *out) {
    char *end;
    errno                = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') {
        txt_term_printf(stderr, "%s: --%s '%s': expected a non-negative integer\n", tool, name, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* The next of the tool's own options (getopt_long's value; optarg as getopt left it), or -1 at the
 * end of the options or when the tool must stop: -h/--help prints usage on stdout and sets *rc to
 * 0, an unknown option, a missing value or a value given to a switch prints what is wrong
 * (txt_getopt_error: getopt's own messages quote the argument raw) and usage on stderr and sets *rc to 2. A
 * switch (getopt set it through its flag pointer) is passed over. *rc is left alone otherwise: start it at -1
 * and return it when it is >= 0 after the loop. */
static inline int tool_getopt(int argc, char **argv, const struct option *lo, void (*usage)(FILE *),
                              int *rc) {
    int c;
    opterr = 0; /* txt_getopt_error says what is wrong, escaped */
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) == 0)
        ;
    if (c == 'h' || c == '?' || c == ':') {
        if (c != 'h')
            txt_getopt_error(stderr, c, argv, lo);
        usage(c == 'h' ? stdout : stderr);
        *rc = c == 'h' ? 0 : 2;
        return -1;
    }
    return c;
}
