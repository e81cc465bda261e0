/*
 * outfile.c: where and how output files are written (outfile.h).
 *
 * Design.  A FIFO or character device is recognised with stat on the path
 * as given (the kernel follows its own magic links, /dev/stdout among
 * them).  Anything else is classified from lstat after following
 * symlinks by hand (readlink, up to OUTFILE_MAX_HOPS): following by hand
 * rather than with realpath lets a dangling link name a file still to be
 * created, and gives the directory the temporary must live in (rename is
 * only atomic within one filesystem, so the temporary sits next to the
 * final target, not next to the link).  Write-through targets are opened
 * without O_CREAT and re-checked with fstat, so a FIFO swapped for a
 * regular file in between is refused rather than overwritten in place.
 *
 * A replaced file is first an O_TMPFILE inode: nothing has a name until
 * linkat gives it one just before the rename, which is what makes a kill
 * at any earlier moment leave no litter.  Filesystems without O_TMPFILE
 * get a named temporary created with O_EXCL; a later write to the same
 * target sweeps temporaries of processes that no longer exist.  The new
 * file gets mode 0666 minus the umask, like a shell redirection, and not
 * the old file's mode.
 *
 * Why the fsync hook is global: the writers are deep inside libraries
 * (checkpoints are written by the trainer), and a test needs to fail the
 * third fsync of a command without threading a parameter through them.
 */
#include "src/outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Symlink hops followed before giving up (the kernel's own limit). */
#define OUTFILE_MAX_HOPS 40
/* Attempts at an unused temporary name before giving up. */
#define OUTFILE_NAME_TRIES 100

static int (*fsync_hook)(int fd, void *ctx); /* NULL: plain fsync */
static void *fsync_ctx;                      /* passed to fsync_hook */
static int force_named;                      /* tests: skip O_TMPFILE */

void outfile_set_named_temporaries(int named)
{
    force_named = named;
}

void outfile_set_fsync_hook(int (*hook)(int fd, void *ctx), void *ctx)
{
    fsync_hook = hook;
    fsync_ctx = ctx;
}

/* fsync(fd), or the test's hook.  Returns 0 or -1 with errno set. */
static int do_fsync(int fd)
{
    return fsync_hook ? fsync_hook(fd, fsync_ctx) : fsync(fd);
}

/* The directory part of path (malloc'd): "." when it has no slash. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Follows symlinks from path.  Stores the final path in *target
 * (malloc'd), and whether it exists in *exists with its lstat in *st.
 * Returns 0 or -1 with err set (loop, unreadable link, lstat error other
 * than ENOENT such as a file used as a directory). */
static int resolve(const char *path, char **target, int *exists, struct stat *st, zb_err *err)
{
    char *cur = strdup(path);
    if (!cur)
        return zb_fail(err, "out of memory");
    for (int hop = 0;; hop++) {
        if (lstat(cur, st) != 0) {
            if (errno == ENOENT) {
                *exists = 0;
                *target = cur;
                return 0;
            }
            int e = errno;
            free(cur);
            return zb_fail(err, "cannot write '%s': %s", path, strerror(e));
        }
        if (!S_ISLNK(st->st_mode)) {
            *exists = 1;
            *target = cur;
            return 0;
        }
        if (hop == OUTFILE_MAX_HOPS) {
            free(cur);
            return zb_fail(err, "cannot write '%s': too many levels of symbolic links", path);
        }
        char link[PATH_MAX];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0 || n == (ssize_t)sizeof link - 1) {
            int e = n < 0 ? errno : ENAMETOOLONG;
            free(cur);
            return zb_fail(err, "cannot write '%s': cannot read the symbolic link: %s", path,
                           strerror(e));
        }
        link[n] = '\0';
        char *next;
        if (link[0] == '/') {
            next = strdup(link);
        } else {
            char *dir = dir_of(cur);
            next = NULL;
            if (dir && asprintf(&next, "%s/%s", dir, link) < 0)
                next = NULL;
            free(dir);
        }
        free(cur);
        if (!next)
            return zb_fail(err, "out of memory");
        cur = next;
    }
}

int outfile_check(const char *path, outfile_kind *kind, char **target, zb_err *err)
{
    if (target)
        *target = NULL;
    if (!path || !strcmp(path, "-")) {
        *kind = OUTFILE_STDOUT;
        return 0;
    }
    if (!path[0])
        return zb_fail(err, "an output path is empty ('-' is standard output)");
    /* Write-through targets are opened by the path as given, so that the
     * kernel's own links work: /dev/stdout -> /proc/self/fd/1 -> "pipe:[N]"
     * reads back as a name that is no path at all. */
    struct stat direct;
    if (stat(path, &direct) == 0 && (S_ISFIFO(direct.st_mode) || S_ISCHR(direct.st_mode))) {
        *kind = OUTFILE_THROUGH;
        if (target && !(*target = strdup(path)))
            return zb_fail(err, "out of memory");
        return 0;
    }
    char *t = NULL;
    int exists;
    struct stat st;
    if (resolve(path, &t, &exists, &st, err) != 0)
        return -1;
    if (exists && S_ISDIR(st.st_mode)) {
        free(t);
        return zb_fail(err, "cannot write '%s': it is a directory", path);
    } else if (exists && !S_ISREG(st.st_mode)) {
        free(t);
        return zb_fail(err, "cannot write '%s': not a regular file, FIFO or character device "
                       "(refusing to replace it)", path);
    } else if (t[strlen(t) - 1] == '/') {
        free(t);
        return zb_fail(err, "cannot write '%s': the name ends in '/' (a directory)", path);
    } else {
        /* A file to replace or create: its directory must take a new name. */
        *kind = OUTFILE_REPLACE;
        char *dir = dir_of(t);
        struct stat ds;
        int e = 0;
        if (!dir)
            e = ENOMEM;
        else if (stat(dir, &ds) != 0)
            e = errno;
        else if (!S_ISDIR(ds.st_mode))
            e = ENOTDIR;
        else if (access(dir, W_OK | X_OK) != 0)
            e = errno;
        if (e) {
            zb_fail(err, "cannot create '%s' in directory '%s': %s", path, dir ? dir : "?",
                    strerror(e));
            free(dir);
            free(t);
            return -1;
        }
        free(dir);
    }
    if (target)
        *target = t;
    else
        free(t);
    return 0;
}

int outfile_check_distinct(const char *out, const char *in, zb_err *err)
{
    if (!out || !in || !strcmp(out, "-") || !strcmp(in, "-"))
        return 0;
    struct stat so, si;
    if (stat(out, &so) != 0 || stat(in, &si) != 0 || !S_ISREG(so.st_mode))
        return 0;
    if (so.st_dev == si.st_dev && so.st_ino == si.st_ino)
        return zb_fail(err, "the output '%s' is the input '%s' (the same file); refusing to "
                       "overwrite it", out, in);
    return 0;
}

/* target (symlinks followed, as outfile_check gives it) with its
 * directory made canonical by realpath: one spelling per place.  NULL
 * when the directory cannot be resolved or memory runs out. */
static char *canonical_target(const char *target)
{
    char *dir = dir_of(target);
    const char *slash = strrchr(target, '/');
    const char *base = slash ? slash + 1 : target;
    char *real = dir ? realpath(dir, NULL) : NULL;
    char *out = NULL;
    if (real && asprintf(&out, "%s/%s", strcmp(real, "/") ? real : "", base) < 0)
        out = NULL;
    free(real);
    free(dir);
    return out;
}

int outfile_same_target(const char *a, const char *b)
{
    outfile_kind ka, kb;
    char *ta = NULL, *tb = NULL;
    zb_err ignored = { { 0 } };
    int same = 0;
    if (outfile_check(a, &ka, &ta, &ignored) == 0 && outfile_check(b, &kb, &tb, &ignored) == 0 &&
        ka == OUTFILE_REPLACE && kb == OUTFILE_REPLACE) {
        struct stat sa, sb;
        if (stat(ta, &sa) == 0 && stat(tb, &sb) == 0) {
            same = sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
        } else {
            char *ca = canonical_target(ta), *cb = canonical_target(tb);
            same = ca && cb && strcmp(ca, cb) == 0;
            free(ca);
            free(cb);
        }
    }
    free(ta);
    free(tb);
    return same;
}

/* Writes a fresh temporary name for target into *name (malloc'd):
 * "TARGET.tmp.PID.XXXXXX", the PID letting a later write spot leftovers. */
static int temp_name(const char *target, char **name)
{
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long r = ((unsigned long)ts.tv_nsec ^ ((unsigned long)++counter << 20)) & 0xffffffUL;
    return asprintf(name, "%s.tmp.%ld.%06lx", target, (long)getpid(), r) < 0 ? -1 : 0;
}

/* Frees what o owns and resets it to a closed, empty state. */
static void release(outfile *o)
{
    free(o->shown);
    free(o->target);
    free(o->dir);
    free(o->tmp_name);
    *o = (outfile){ .fd = -1 };
}

int outfile_open(outfile *o, const char *path, zb_err *err)
{
    *o = (outfile){ .fd = -1 };
    if (outfile_check(path, &o->kind, &o->target, err) != 0)
        return -1;
    o->shown = strdup(path ? path : "-");
    if (!o->shown) {
        release(o);
        return zb_fail(err, "out of memory");
    }
    if (o->kind == OUTFILE_STDOUT)
        return 0;
    if (o->kind == OUTFILE_THROUGH) {
        o->fd = open(o->target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        int e = o->fd < 0 ? errno : 0;
        if (!e && fstat(o->fd, &st) != 0)
            e = errno;
        if (!e && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
            e = EEXIST; /* swapped for something else since the check */
        if (e) {
            zb_fail(err, "cannot write '%s': %s", path,
                    e == EEXIST ? "it changed while being opened" : strerror(e));
            if (o->fd >= 0)
                close(o->fd);
            release(o);
            return -1;
        }
        return 0;
    }
    o->dir = dir_of(o->target);
    if (!o->dir) {
        release(o);
        return zb_fail(err, "out of memory");
    }
    /* The unnamed inode needs /proc/self/fd for linkat later. */
    if (!force_named && access("/proc/self/fd", X_OK) == 0) {
        o->fd = open(o->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (o->fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
            zb_fail(err, "cannot write '%s': cannot create a file in '%s': %s", path, o->dir,
                    strerror(errno));
            release(o);
            return -1;
        }
    }
    for (int i = 0; o->fd < 0 && i < OUTFILE_NAME_TRIES; i++) {
        free(o->tmp_name);
        if (temp_name(o->target, &o->tmp_name) != 0) {
            o->tmp_name = NULL;
            release(o);
            return zb_fail(err, "out of memory");
        }
        o->fd = open(o->tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (o->fd < 0 && errno != EEXIST) {
            zb_fail(err, "cannot write '%s': cannot create '%s': %s", path, o->tmp_name,
                    strerror(errno));
            free(o->tmp_name);
            o->tmp_name = NULL;
            release(o);
            return -1;
        }
    }
    if (o->fd < 0) {
        release(o);
        return zb_fail(err, "cannot write '%s': no unused temporary name", path);
    }
    return 0;
}

int outfile_write(outfile *o, const void *data, size_t len, zb_err *err)
{
    if (o->failed)
        return -1;
    if (o->kind == OUTFILE_STDOUT) {
        if (len > 0 && fwrite(data, 1, len, stdout) != len) {
            o->failed = 1;
            return zb_fail(err, "cannot write to standard output: %s", strerror(errno));
        }
        return 0;
    }
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(o->fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            o->failed = 1;
            return zb_fail(err, "cannot write '%s': %s", o->shown, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Removes temporaries of target left by processes that are gone: names
 * "BASE.tmp.PID.*" in dir whose PID no longer exists here.  Best effort. */
static void sweep_leftovers(const outfile *o)
{
    const char *slash = strrchr(o->target, '/');
    const char *base = slash ? slash + 1 : o->target;
    size_t blen = strlen(base);
    DIR *d = opendir(o->dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0)
            continue;
        char *end;
        long pid = strtol(n + blen + 5, &end, 10);
        /* "PID.XXXXXX", or the bare "PID" of checkpoints from before outfile */
        if (pid <= 0 || (*end != '.' && *end != '\0') || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

/* Gives the unnamed O_TMPFILE inode o->fd a temporary name in o->dir. */
static int link_unnamed(outfile *o)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
    for (int i = 0; i < OUTFILE_NAME_TRIES; i++) {
        free(o->tmp_name);
        if (temp_name(o->target, &o->tmp_name) != 0) {
            o->tmp_name = NULL;
            errno = ENOMEM;
            return -1;
        }
        if (linkat(AT_FDCWD, proc, AT_FDCWD, o->tmp_name, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        if (errno != EEXIST)
            break;
    }
    int e = errno;
    free(o->tmp_name);
    o->tmp_name = NULL;
    errno = e;
    return -1;
}

int outfile_commit(outfile *o, zb_err *err)
{
    if (o->failed) {
        if (err && !err->msg[0])
            zb_fail(err, "cannot write '%s': an earlier write failed", o->shown);
        outfile_abort(o);
        return -1;
    }
    if (o->kind == OUTFILE_STDOUT) {
        int rc = fflush(stdout) != 0 ? zb_fail(err, "cannot write to standard output: %s",
                                               strerror(errno)) : 0;
        release(o);
        return rc;
    }
    if (o->kind == OUTFILE_THROUGH) {
        int rc = close(o->fd) != 0 ? zb_fail(err, "cannot write '%s': %s", o->shown,
                                             strerror(errno)) : 0;
        o->fd = -1;
        release(o);
        return rc;
    }
    const char *step = "fsync";
    int named = o->tmp_name != NULL;
    if (do_fsync(o->fd) != 0)
        goto fail;
    step = "naming the temporary";
    if (!named && link_unnamed(o) != 0)
        goto fail;
    step = "close";
    int fd = o->fd;
    o->fd = -1;
    if (close(fd) != 0)
        goto fail;
    step = "rename";
    if (rename(o->tmp_name, o->target) != 0)
        goto fail;
    free(o->tmp_name);
    o->tmp_name = NULL;
    /* The rename lives in the directory: sync it too.  Filesystems that
     * can't sync a directory say EINVAL, and a directory we may write but
     * not read can't be opened (EACCES); nothing more can be done there. */
    int rc = 0;
    int dfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if ((dfd < 0 && errno != EACCES) || (dfd >= 0 && do_fsync(dfd) != 0 && errno != EINVAL))
        rc = zb_fail(err, "'%s' was written, but syncing its directory '%s' failed: %s",
                     o->shown, o->dir, strerror(errno));
    if (dfd >= 0)
        close(dfd);
    sweep_leftovers(o);
    release(o);
    return rc;
fail:
    zb_fail(err, "cannot write '%s': %s failed: %s", o->shown, step, strerror(errno));
    outfile_abort(o);
    return -1;
}

void outfile_abort(outfile *o)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    if (o->tmp_name)
        unlink(o->tmp_name);
    release(o);
}

int outfile_write_all(const char *path, const void *data, size_t len, zb_err *err)
{
    outfile o;
    if (outfile_open(&o, path, err) != 0)
        return -1;
    if (outfile_write(&o, data, len, err) != 0) {
        outfile_abort(&o);
        return -1;
    }
    return outfile_commit(&o, err);
}
