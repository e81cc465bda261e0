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
 *   - the directory: the manifest round-trips; ckptset_load takes the newer
 *     of checkpoint.bin and the set; an orphan part of an unfinished save
 *     does not matter and is pruned; the one-process save removes the set;
 *     a damaged manifest is one error.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/ckpt_set.h"
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

/* Writes trainer a as a two-rank set of tag to dir with its manifest, as
 * mpi_pipeline_save does (without MPI). */
static void save_set(trainer *a, const char *tag)
{
    zb_err err = { { 0 } };
    unsigned char own[2][2] = { { 1, 0 }, { 0, 1 } };
    char path[256];
    for (int r = 0; r < 2; r++) {
        ck_assert(ckptset_part_path(dir, tag, r, path, sizeof path, &err) == 0);
        ck_assert_msg(trainer_save_stages(a, path, own[r], &err) == 0, "%s", err.msg);
    }
    ckptset_manifest m = { .step = trainer_get_stats(a)->step, .ranks = 2 };
    strcpy(m.tag, tag);
    ck_assert_msg(ckptset_manifest_write(dir, &m, &err) == 0, "%s", err.msg);
    ckptset_prune(dir, 0, tag, 1);
    ckptset_prune(dir, 1, tag, 0);
}

START_TEST(directory_newest_wins_and_orphans_go)
{
    make_dir();
    sched_t *s = fixture_gpipe2();
    zb_data *d = fixture_data(32);
    zb_err err = { { 0 } };
    char buf[256];
    trainer *a = make(s, d, 5);
    steps(a, 1);
    ck_assert(ckptset_save_single(a, dir, &err) == 0);
    steps(a, 1);
    save_set(a, "00000000000000aa"); /* step 2, and checkpoint.bin is removed */
    ck_assert_int_ne(access(in_dir(CKPTSET_SINGLE, buf), F_OK), 0);
    ckptset_manifest m;
    ck_assert_int_eq(ckptset_manifest_read(dir, &m, &err), 1);
    ck_assert(m.step == 2 && m.ranks == 2 && strcmp(m.tag, "00000000000000aa") == 0);

    /* one process assembles the set; a rank of the same layout reads its own */
    const char *what = NULL;
    trainer *b = make(s, d, 6);
    ck_assert_msg(ckptset_load(b, dir, -1, 1, &what, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(what, CKPTSET_MANIFEST);
    ck_assert(same_stage(a, b, 0) && same_stage(a, b, 1));
    trainer_free(b);
    b = make(s, d, 6);
    ck_assert(ckptset_load(b, dir, 1, 2, &what, &err) == 0);
    ck_assert(same_stage(a, b, 1) && !same_stage(a, b, 0));
    trainer_free(b);

    /* an unfinished later save (one part of tag bb, no manifest): ignored,
     * then pruned by the next committed save */
    steps(a, 1);
    char orphan[256];
    unsigned char own0[2] = { 1, 0 };
    ck_assert(ckptset_part_path(dir, "00000000000000bb", 0, orphan, sizeof orphan, &err) == 0);
    ck_assert(trainer_save_stages(a, orphan, own0, &err) == 0);
    b = make(s, d, 6);
    ck_assert(ckptset_load(b, dir, -1, 1, NULL, &err) == 0);
    ck_assert_int_eq(trainer_get_stats(b)->step, 2);
    trainer_free(b);
    save_set(a, "00000000000000cc");
    ck_assert_int_ne(access(orphan, F_OK), 0);
    ck_assert(ckptset_part_path(dir, "00000000000000aa", 1, buf, sizeof buf, &err) == 0);
    ck_assert_int_ne(access(buf, F_OK), 0);

    /* both present (a crash between a save and its clean-up): the newer
     * step wins either way */
    trainer *old = make(s, d, 5);
    steps(old, 1);
    ck_assert(trainer_save(old, in_dir(CKPTSET_SINGLE, buf), &err) == 0); /* step 1 < 3 */
    b = make(s, d, 6);
    ck_assert(ckptset_load(b, dir, -1, 1, &what, &err) == 0);
    ck_assert_str_eq(what, CKPTSET_MANIFEST);
    ck_assert_int_eq(trainer_get_stats(b)->step, 3);
    trainer_free(b);
    steps(old, 3);
    ck_assert(trainer_save(old, in_dir(CKPTSET_SINGLE, buf), &err) == 0); /* step 4 > 3 */
    b = make(s, d, 6);
    ck_assert(ckptset_load(b, dir, -1, 1, &what, &err) == 0);
    ck_assert_str_eq(what, CKPTSET_SINGLE);
    ck_assert_int_eq(trainer_get_stats(b)->step, 4);
    trainer_free(b);

    /* the one-process save supersedes the set: manifest and parts go */
    ck_assert(ckptset_save_single(old, dir, &err) == 0);
    ck_assert_int_eq(ckptset_manifest_read(dir, &m, &err), 0);
    ck_assert(ckptset_part_path(dir, "00000000000000cc", 0, buf, sizeof buf, &err) == 0);
    ck_assert_int_ne(access(buf, F_OK), 0);

    /* a damaged manifest: one error, nothing loaded */
    FILE *f = fopen(in_dir(CKPTSET_MANIFEST, buf), "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"step\": 3, \"ranks\": 2}\n", f);
    fclose(f);
    b = make(s, d, 6);
    ck_assert_int_eq(ckptset_load(b, dir, -1, 1, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "not a checkpoint manifest"), "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(b)->step, 0);
    trainer_free(b);
    trainer_free(old);
    trainer_free(a);
    data_free(d);
    sched_free(s);
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
    tcase_add_test(tc, directory_newest_wins_and_orphans_go);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
