/*
 * test_ckpt_set.c: checkpoints in parts, one per process (trainer_save_stages,
 * trainer_load_parts, runtime/ckpt_set.h):
 *
 *   - the parts of a two-stage trainer, written separately, load into a
 *     fresh trainer as the whole checkpoint does: same parameters, moments,
 *     step, and the next step's loss is the same bits;
 *   - refused, leaving the trainer as it was: a stage held twice, a stage
 *     held by none (when all are needed), parts of two different steps;
 *     without need_all, the stages held by no part keep their values;
 *   - the directory (version 2): one save is one manifest naming its parts,
 *     with the model and run records inside; the next save prunes the old
 *     set, an orphan part of an unfinished save and the older layout's
 *     files; a missing part or a damaged manifest is one error that
 *     deletes nothing and falls back to nothing; another model's record
 *     is refused naming both;
 *   - older directories (version 1: checkpoint.bin with model.json and
 *     run.json, or a version-1 manifest and its parts) still load, the
 *     later of the two wins, and an unreadable one of the two refuses the
 *     directory instead of silently taking the other;
 *   - two ranks (threads here) commit together: when one cannot make its
 *     part durable, both fail with its message and the previous
 *     checkpoint stays the directory's;
 *   - the lock keeps a second writer (another process) out.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/ckpt_set.h"
#include "runtime/run_record.h"
#include "src/outfile.h"
#include "tests/common/trainer_fixture.h"

static trainer_opts opts_seed(uint64_t seed)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = seed;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 100;
    o.eval_windows = 2;
    return o;
}

static trainer *make(const sched_t *s, const zb_data *d, uint64_t seed)
{
    zb_model m = fixture_model();
    trainer_opts o = opts_seed(seed);
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
    return t;
}

static void steps(trainer *t, int n)
{
    zb_err err = { { 0 } };
    double loss;
    for (int i = 0; i < n; i++)
        ck_assert_msg(trainer_step(t, &loss, &err) == 0, "%s", err.msg);
}

/* 1 when stage st of a and b hold the same parameters and moments. */
static int same_stage(trainer *a, trainer *b, int st)
{
    size_t n, n2;
    float *(*get[3])(trainer *, int, size_t *) = { trainer_stage_params, trainer_stage_adam_m,
                                                   trainer_stage_adam_v };
    for (int k = 0; k < 3; k++) {
        float *x = get[k](a, st, &n), *y = get[k](b, st, &n2);
        if (n != n2 || memcmp(x, y, n * sizeof *x) != 0)
            return 0;
    }
    return *trainer_stage_adam_t(a, st) == *trainer_stage_adam_t(b, st);
}

static char dir[64];

static void make_dir(void)
{
    strcpy(dir, "/tmp/zb-ckpt-set-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(const char *name, char *buf)
{
    snprintf(buf, 256, "%s/%s", dir, name);
    return buf;
}

START_TEST(parts_load_as_the_whole_checkpoint)
{
    make_dir();
    sched_t *s = fixture_gpipe2();
    zb_data *d = fixture_data(32);
    zb_err err = { { 0 } };
    trainer *a = make(s, d, 5);
    steps(a, 2);
    char p0[256], p1[256];
    unsigned char own0[2] = { 1, 0 }, own1[2] = { 0, 1 };
    ck_assert_msg(trainer_save_stages(a, in_dir("p0.bin", p0), own0, &err) == 0, "%s", err.msg);
    ck_assert_msg(trainer_save_stages(a, in_dir("p1.bin", p1), own1, &err) == 0, "%s", err.msg);
    trainer *b = make(s, d, 6); /* another seed: other initial weights */
    ck_assert(!same_stage(a, b, 0));
    const char *both[2] = { p1, p0 }; /* any order */
    ck_assert_msg(trainer_load_parts(b, both, 2, 1, &err) == 0, "%s", err.msg);
    ck_assert(same_stage(a, b, 0) && same_stage(a, b, 1));
    ck_assert_int_eq(trainer_get_stats(b)->step, 2);
    double la, lb;
    ck_assert(trainer_step(a, &la, &err) == 0 && trainer_step(b, &lb, &err) == 0);
    ck_assert(memcmp(&la, &lb, sizeof la) == 0); /* same data position too */
    trainer_free(a);
    trainer_free(b);
    data_free(d);
    sched_free(s);
    remove_dir();
}
END_TEST

START_TEST(bad_sets_are_refused_and_change_nothing)
{
    make_dir();
    sched_t *s = fixture_gpipe2();
    zb_data *d = fixture_data(32);
    zb_err err = { { 0 } };
    trainer *a = make(s, d, 5);
    steps(a, 1);
    char p0[256], p1[256], full[256], late1[256];
    unsigned char own0[2] = { 1, 0 }, own1[2] = { 0, 1 };
    ck_assert(trainer_save_stages(a, in_dir("p0.bin", p0), own0, &err) == 0);
    ck_assert(trainer_save_stages(a, in_dir("p1.bin", p1), own1, &err) == 0);
    ck_assert(trainer_save(a, in_dir("full.bin", full), &err) == 0);
    steps(a, 1);
    ck_assert(trainer_save_stages(a, in_dir("late1.bin", late1), own1, &err) == 0);

    trainer *b = make(s, d, 6), *ref = make(s, d, 6);
    const char *twice[2] = { full, p1 }, *one[1] = { p0 }, *mixed[2] = { p0, late1 };
    ck_assert_int_eq(trainer_load_parts(b, twice, 2, 1, &err), -1);
    ck_assert_msg(strstr(err.msg, "stage 1 is also in"), "%s", err.msg);
    ck_assert_int_eq(trainer_load_parts(b, one, 1, 1, &err), -1);
    ck_assert_msg(strstr(err.msg, "stage 1 is in none"), "%s", err.msg);
    ck_assert_int_eq(trainer_load_parts(b, mixed, 2, 1, &err), -1);
    ck_assert_msg(strstr(err.msg, "parts of two checkpoints"), "%s", err.msg);
    ck_assert(same_stage(b, ref, 0) && same_stage(b, ref, 1));
    ck_assert_int_eq(trainer_get_stats(b)->step, 0);
    /* without need_all: stage 0 from the part, stage 1 as it was */
    ck_assert_msg(trainer_load_parts(b, one, 1, 0, &err) == 0, "%s", err.msg);
    ck_assert(!same_stage(b, ref, 0) && same_stage(b, ref, 1));
    ck_assert_int_eq(trainer_get_stats(b)->step, 1);
    trainer_free(a);
    trainer_free(b);
    trainer_free(ref);
    data_free(d);
    sched_free(s);
    remove_dir();
}
END_TEST

/* ---- the directory ------------------------------------------------------ */

/* The records a run commits with its checkpoint (the trainer's model and
 * the text's characters, a run record). */
typedef struct records {
    cJSON *model, *run;
    ckptset_records rec;
} records;

static records make_records(trainer *t, const zb_data *d, long seed)
{
    records r;
    r.model = ckptset_model_record(trainer_model(t), d->chars, d->vocab);
    run_identity id = { .rope_theta = 10000, .batch_size = 2, .micro_batches = 4, .seed = seed,
                        .data_hash = run_data_hash(d), .data_bytes = d->n_tokens };
    r.run = run_record_to_json(&id);
    ck_assert(r.model && r.run);
    r.rec = (ckptset_records){ r.model, r.run };
    return r;
}

static void free_records(records *r)
{
    cJSON_Delete(r->model);
    cJSON_Delete(r->run);
}

/* Files in dir whose name starts with prefix. */
static int count_files(const char *prefix)
{
    DIR *dp = opendir(dir);
    ck_assert_ptr_nonnull(dp);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(dp);
    return n;
}

/* Opens dir's checkpoint and loads it into a fresh trainer (seed 6, other
 * initial weights); returns it, or NULL with err set. */
static trainer *load_fresh(const sched_t *s, const zb_data *d, int rank, int world, zb_err *err)
{
    ckptset_view v;
    int found = ckptset_open(dir, &v, err);
    if (found <= 0) {
        if (found == 0)
            zb_fail(err, "no checkpoint");
        return NULL;
    }
    trainer *b = make(s, d, 6);
    int rc = ckptset_load(b, &v, rank, world, NULL, err);
    ckptset_view_free(&v);
    if (rc != 0) {
        trainer_free(b);
        return NULL;
    }
    return b;
}

START_TEST(directory_is_one_committed_unit)
{
    make_dir();
    sched_t *s = fixture_gpipe2();
    zb_data *d = fixture_data(32);
    zb_err err = { { 0 } };
    char buf[256];
    trainer *a = make(s, d, 5);
    records r = make_records(a, d, 5);
    steps(a, 1);
    ck_assert_msg(ckptset_save(a, dir, &r.rec, NULL, NULL, &err) == 0, "%s", err.msg);
    /* one manifest naming one part; the records inside the manifest */
    ck_assert_int_eq(count_files("checkpoint.") - 1, 1);
    ck_assert_int_eq(access(in_dir(CKPTSET_MODEL, buf), F_OK), -1);
    ckptset_view v;
    ck_assert_int_eq(ckptset_open(dir, &v, &err), 1);
    ck_assert_int_eq(v.version, CKPTSET_VERSION);
    ck_assert(v.step == 1 && v.ranks == 1 && v.stages == 2);
    ck_assert_int_eq(v.parameters, (long)trainer_param_count(a));
    ck_assert(cJSON_Compare(v.model, r.model, 1) && cJSON_Compare(v.run, r.run, 1));
    ck_assert_int_eq(ckptset_check_model(&v, trainer_model(a), d->chars, d->vocab, &err), 0);
    /* the record of another model is refused, naming both */
    zb_model other = *trainer_model(a);
    other.n_layers = 6;
    ck_assert_int_eq(ckptset_check_model(&v, &other, d->chars, d->vocab, &err), -1);
    ck_assert_msg(strstr(err.msg, "4 layers") && strstr(err.msg, "6 layers"), "%s", err.msg);
    ckptset_view_free(&v);
    trainer *b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert(same_stage(a, b, 0) && same_stage(a, b, 1));
    trainer_free(b);

    /* the older layout's files go with the next commit; an orphan part of
     * an unfinished save is ignored, then pruned */
    FILE *f = fopen(in_dir(CKPTSET_SINGLE, buf), "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    steps(a, 1);
    char orphan[256];
    unsigned char own0[2] = { 1, 0 };
    ck_assert(ckptset_part_path(dir, "00000000000000bb", 0, orphan, sizeof orphan, &err) == 0);
    ck_assert(trainer_save_stages(a, orphan, own0, &err) == 0);
    b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(b)->step, 1);
    trainer_free(b);
    ck_assert(ckptset_save(a, dir, &r.rec, NULL, NULL, &err) == 0);
    ck_assert_int_ne(access(orphan, F_OK), 0);
    ck_assert_int_ne(access(in_dir(CKPTSET_SINGLE, buf), F_OK), 0);
    ck_assert_int_eq(count_files("checkpoint.") - 1, 1); /* the step-1 set is gone */

    /* a part the manifest names is missing: one error naming it, and
     * nothing else of the directory is touched (no fallback, no delete) */
    ck_assert_int_eq(ckptset_open(dir, &v, &err), 1);
    char part[256];
    strcpy(part, v.parts[0]);
    ckptset_view_free(&v);
    ck_assert_int_eq(rename(part, in_dir("moved.bin", buf)), 0);
    ck_assert_int_eq(ckptset_open(dir, &v, &err), -1);
    ck_assert_msg(strstr(err.msg, "is missing") && strstr(err.msg, part), "%s", err.msg);
    ck_assert_int_eq(access(in_dir(CKPTSET_MANIFEST, buf), F_OK), 0);
    ck_assert_int_eq(rename(in_dir("moved.bin", buf), part), 0);

    /* a damaged manifest: one error, nothing loaded */
    f = fopen(in_dir(CKPTSET_MANIFEST, buf), "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"step\": 3, \"ranks\": 2}\n", f);
    fclose(f);
    ck_assert_ptr_null(load_fresh(s, d, 0, 1, &err));
    ck_assert_msg(strstr(err.msg, "not a checkpoint manifest"), "%s", err.msg);
    free_records(&r);
    trainer_free(a);
    data_free(d);
    sched_free(s);
    remove_dir();
}
END_TEST

/* Writes trainer a as a two-rank set of tag to dir with a version-1
 * manifest, as zbsched before the records went into the manifest did. */
static void save_v1_set(trainer *a, const char *tag)
{
    zb_err err = { { 0 } };
    unsigned char own[2][2] = { { 1, 0 }, { 0, 1 } };
    char path[256];
    for (int r = 0; r < 2; r++) {
        ck_assert(ckptset_part_path(dir, tag, r, path, sizeof path, &err) == 0);
        ck_assert_msg(trainer_save_stages(a, path, own[r], &err) == 0, "%s", err.msg);
    }
    char buf[256];
    FILE *f = fopen(in_dir(CKPTSET_MANIFEST, buf), "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\n\t\"format\":\t\"zbsched checkpoint parts\",\n\t\"version\":\t1,\n\t\"step\":\t%ld,"
            "\n\t\"ranks\":\t2,\n\t\"tag\":\t\"%s\",\n\t\"parts\":\t[\"checkpoint.%s.rank-0.bin\", "
            "\"checkpoint.%s.rank-1.bin\"]\n}\n", trainer_get_stats(a)->step, tag, tag, tag);
    fclose(f);
}

START_TEST(old_directories_still_load)
{
    make_dir();
    sched_t *s = fixture_gpipe2();
    zb_data *d = fixture_data(32);
    zb_err err = { { 0 } };
    char buf[256];
    trainer *a = make(s, d, 5);
    records r = make_records(a, d, 5);
    steps(a, 1);
    /* version 1, one process: checkpoint.bin, model.json, run.json */
    ck_assert(trainer_save(a, in_dir(CKPTSET_SINGLE, buf), &err) == 0);
    char *mtext = cJSON_Print(r.model), *rtext = cJSON_Print(r.run);
    FILE *f = fopen(in_dir(CKPTSET_MODEL, buf), "w");
    fputs(mtext, f);
    fclose(f);
    f = fopen(in_dir(CKPTSET_RUN, buf), "w");
    fputs(rtext, f);
    fclose(f);
    free(mtext);
    free(rtext);
    ckptset_view v;
    ck_assert_int_eq(ckptset_open(dir, &v, &err), 1);
    ck_assert(v.version == 0 && v.ranks == 1 && v.stages == -1);
    ck_assert(cJSON_Compare(v.model, r.model, 1) && cJSON_Compare(v.run, r.run, 1));
    ckptset_view_free(&v);
    trainer *b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert(same_stage(a, b, 0) && same_stage(a, b, 1));
    trainer_free(b);

    /* version 1, two ranks, a later step: the set wins; one process
     * assembles it, a rank of the same layout reads its own part */
    steps(a, 1);
    save_v1_set(a, "00000000000000aa");
    b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(b)->step, 2);
    ck_assert(same_stage(a, b, 0) && same_stage(a, b, 1));
    trainer_free(b);
    b = load_fresh(s, d, 1, 2, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert(same_stage(a, b, 1) && !same_stage(a, b, 0));
    trainer_free(b);
    /* both present, checkpoint.bin the later: it wins */
    trainer *later = make(s, d, 5);
    steps(later, 3);
    ck_assert(trainer_save(later, in_dir(CKPTSET_SINGLE, buf), &err) == 0);
    b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(b)->step, 3);
    trainer_free(b);
    /* both present, checkpoint.bin unreadable: either could be the newer,
     * so the directory is refused rather than the set silently taken */
    ck_assert_int_eq(truncate(in_dir(CKPTSET_SINGLE, buf), 100), 0);
    ck_assert_ptr_null(load_fresh(s, d, 0, 1, &err));
    ck_assert_msg(strstr(err.msg, "cannot be read"), "%s", err.msg);
    /* a version-2 save supersedes all of it */
    ck_assert(ckptset_save(a, dir, &r.rec, NULL, NULL, &err) == 0);
    ck_assert_int_ne(access(in_dir(CKPTSET_SINGLE, buf), F_OK), 0);
    ck_assert_int_ne(access(in_dir(CKPTSET_MODEL, buf), F_OK), 0);
    ck_assert_int_ne(access(in_dir(CKPTSET_RUN, buf), F_OK), 0);
    ck_assert_int_eq(count_files("checkpoint.") - 1, 1);
    b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(b)->step, 2);
    trainer_free(b);
    free_records(&r);
    trainer_free(later);
    trainer_free(a);
    data_free(d);
    sched_free(s);
    remove_dir();
}
END_TEST

/* Two ranks as two threads of this process: a job_comm over a barrier. */
typedef struct thread_comm {
    pthread_barrier_t bar;   /* both ranks */
    unsigned char buf[1024]; /* a broadcast's bytes */
    int v[2];                /* each rank's value of a minimum */
} thread_comm;

/* What a rank's callbacks see. */
typedef struct rank_ctx {
    thread_comm *tc; /* shared by the two */
    int rank;        /* this one */
} rank_ctx;

static int tc_bcast(void *ctx, void *buf, size_t bytes, int root, zb_err *err)
{
    (void)err;
    rank_ctx *c = ctx;
    ck_assert(bytes <= sizeof c->tc->buf);
    if (c->rank == root)
        memcpy(c->tc->buf, buf, bytes);
    pthread_barrier_wait(&c->tc->bar);
    if (c->rank != root)
        memcpy(buf, c->tc->buf, bytes);
    pthread_barrier_wait(&c->tc->bar);
    return 0;
}

static int tc_min(void *ctx, int *v, zb_err *err)
{
    (void)err;
    rank_ctx *c = ctx;
    c->tc->v[c->rank] = *v;
    pthread_barrier_wait(&c->tc->bar);
    *v = c->tc->v[0] < c->tc->v[1] ? c->tc->v[0] : c->tc->v[1];
    pthread_barrier_wait(&c->tc->bar);
    return 0;
}

/* One rank's save of its own stage. */
typedef struct rank_job {
    rank_ctx ctx;            /* its callbacks' context */
    job_comm comm;           /* the job_comm over it */
    trainer *t;              /* this rank's copy of the trainer */
    ckptset_records *rec;    /* the records */
    int fail_disk;           /* 1: this rank's fsyncs fail */
    int rc;                  /* ckptset_save's */
    zb_err err;              /* its message */
} rank_job;

static _Thread_local int fail_fsync_here; /* this thread's fsyncs fail */

static int fsync_hook(int fd, void *ctx)
{
    (void)ctx;
    if (fail_fsync_here) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    unsigned char own[2] = { j->ctx.rank == 0, j->ctx.rank == 1 };
    fail_fsync_here = j->fail_disk;
    j->rc = ckptset_save(j->t, dir, j->rec, &j->comm, own, &j->err);
    return NULL;
}

static void save_as_two_ranks(trainer *t0, trainer *t1, ckptset_records *rec, int failing,
                              rank_job job[2])
{
    thread_comm tc;
    pthread_barrier_init(&tc.bar, NULL, 2);
    trainer *ts[2] = { t0, t1 };
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        job[r] = (rank_job){ .ctx = { &tc, r }, .t = ts[r], .rec = rec, .fail_disk = r == failing };
        job[r].comm = (job_comm){ &job[r].ctx, r, 2, tc_bcast, tc_min };
    }
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &job[r]), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&tc.bar);
}

START_TEST(ranks_commit_together_or_not_at_all)
{
    make_dir();
    sched_t *s = fixture_gpipe2();
    zb_data *d = fixture_data(32);
    zb_err err = { { 0 } };
    trainer *t0 = make(s, d, 5), *t1 = make(s, d, 5);
    records r = make_records(t0, d, 5);
    steps(t0, 2);
    steps(t1, 2);
    rank_job job[2];
    outfile_set_fsync_hook(fsync_hook, NULL);
    save_as_two_ranks(t0, t1, &r.rec, -1, job);
    ck_assert_msg(job[0].rc == 0 && job[1].rc == 0, "%s / %s", job[0].err.msg, job[1].err.msg);
    ck_assert_int_eq(count_files("checkpoint.") - 1, 2);
    trainer *b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert(same_stage(t0, b, 0) && same_stage(t1, b, 1));
    trainer_free(b);
    /* rank 1 cannot make its part durable: both fail with rank 1's message,
     * no manifest is committed, the step-2 checkpoint stays the one */
    steps(t0, 1);
    steps(t1, 1);
    save_as_two_ranks(t0, t1, &r.rec, 1, job);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert(job[0].rc == -1 && job[1].rc == -1);
    ck_assert_msg(strstr(job[0].err.msg, "rank 1: "), "%s", job[0].err.msg);
    b = load_fresh(s, d, 0, 1, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(b)->step, 2);
    trainer_free(b);
    free_records(&r);
    trainer_free(t0);
    trainer_free(t1);
    data_free(d);
    sched_free(s);
    remove_dir();
}
END_TEST

START_TEST(the_lock_keeps_a_second_writer_out)
{
    make_dir();
    zb_err err = { { 0 } };
    int fd = ckptset_lock(dir, &err);
    ck_assert_msg(fd >= 0, "%s", err.msg);
    /* another process: flock locks belong to the open file, so a child
     * that opens the lock again is refused while we hold it */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        zb_err e = { { 0 } };
        int again = ckptset_lock(dir, &e);
        _exit(again < 0 && strstr(e.msg, "in use by another run") ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ckptset_unlock(fd);
    fd = ckptset_lock(dir, &err);
    ck_assert_msg(fd >= 0, "%s", err.msg);
    ckptset_unlock(fd);
    remove_dir();
}
END_TEST

int main(void)
{
    Suite *su = suite_create("runtime_ckpt_set");
    TCase *tc = tcase_create("parts");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, parts_load_as_the_whole_checkpoint);
    tcase_add_test(tc, bad_sets_are_refused_and_change_nothing);
    tcase_add_test(tc, directory_is_one_committed_unit);
    tcase_add_test(tc, old_directories_still_load);
    tcase_add_test(tc, ranks_commit_together_or_not_at_all);
    tcase_add_test(tc, the_lock_keeps_a_second_writer_out);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
