/*
 * lsan_default.c: LeakSanitizer's built-in suppressions for the program.
 *
 * An ASan build of zbsched links Graphviz, whose plugin loader and
 * pango/fontconfig text layout keep memory past gvFreeContext; LSan would
 * report those third-party leaks and make `render --format dag` exit 1.
 * The sanitizer runtime asks a program for default suppressions through
 * this weak hook, so the list in tools/lsan.supp (turned into
 * ZB_LSAN_SUPPRESSIONS by src/cli/meson.build) applies wherever the
 * program runs, not only under `meson test`.  A build without sanitizers
 * never calls it.
 */
#include "src/cli/lsan_supp.h"

const char *__lsan_default_suppressions(void);

const char *__lsan_default_suppressions(void)
{
    return ZB_LSAN_SUPPRESSIONS;
}
