/*
 * ck_skip.h: a Check case that cannot run on this host reads SKIP, not OK.
 *
 * Some cases need what a host may not give: the privilege to mknod a
 * device node, or a machine too small to start a given run.  A case that
 * simply returns early when the precondition fails is reported as passing,
 * and a CI without root then shows "OK" for a check it never made.  Meson
 * reads exit status 77 as SKIP, but only for a whole test program, and
 * Check runs each case in a forked child whose early return it counts as a
 * pass.  So such cases live in a Suite of their own, registered in meson as
 * a second test of the same executable that passes the Suite's name as
 * argv[1] (for example `test('cli_outputs_devices', exe, args :
 * ['devices'])`).  main() calls ck_main_with_optional: with no argument it
 * runs the main Suite; with the optional Suite's name it first asks the
 * probe why the cases cannot run here and, when there is a reason, prints
 * it and exits 77; otherwise it runs the optional Suite, where a failing
 * precondition is now an ordinary failure (the probe said it would hold).
 */
#ifndef ZB_TESTS_COMMON_CK_SKIP_H
#define ZB_TESTS_COMMON_CK_SKIP_H

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The status meson reports as SKIP. */
#define CK_SKIP_STATUS 77

/* Why the optional cases cannot run here: writes a reason of at most cap
 * bytes into why and returns 1, or returns 0 when they can run. */
typedef int (*ck_skip_probe)(char *why, size_t cap);

/* Runs one Suite, taking ownership of it, and returns the process status:
 * 0 when every case passed, 1 otherwise. */
static inline int ck_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* main() for a test with optional cases.  argc/argv are main's; with no
 * argument runs main_suite(); with argv[1] equal to optional_name runs the
 * probe, exiting CK_SKIP_STATUS with "SKIP: <reason>" on stdout when it
 * gives a reason, else runs optional_suite().  Any other argument is a
 * harness error: one line on stderr and status 2. */
static inline int ck_main_with_optional(int argc, char **argv, Suite *(*main_suite)(void),
                                        const char *optional_name, Suite *(*optional_suite)(void),
                                        ck_skip_probe cannot_run)
{
    if (argc < 2)
        return ck_run_suite(main_suite());
    if (argc != 2 || strcmp(argv[1], optional_name) != 0) {
        fprintf(stderr, "%s: unknown case set '%s' (known: %s)\n", argv[0], argv[1], optional_name);
        return 2;
    }
    char why[512] = "";
    if (cannot_run(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        fflush(stdout);
        return CK_SKIP_STATUS;
    }
    return ck_run_suite(optional_suite());
}

/* A ck_skip_probe for cases that mknod a memory device (major 1, minor 3:
 * the null device) in a directory of their own: tries exactly that in a
 * fresh directory under /tmp, removes it, and says why when it fails (not
 * root, or a container without CAP_MKNOD). */
static inline int ck_cannot_mknod(char *why, size_t cap)
{
    char dir[] = "/tmp/zb_mknod_probe_XXXXXX";
    if (!mkdtemp(dir)) {
        snprintf(why, cap, "cannot make a directory under /tmp (%s)", strerror(errno));
        return 1;
    }
    char node[64];
    snprintf(node, sizeof node, "%s/null", dir);
    int failed = mknod(node, S_IFCHR | 0666, makedev(1, 3)) != 0;
    int cause = errno;
    if (!failed)
        unlink(node);
    rmdir(dir);
    if (failed)
        snprintf(why, cap, "this process may not create device nodes (mknod: %s)", strerror(cause));
    return failed;
}

#endif
