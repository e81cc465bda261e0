/*
 * test_cost_files.c: model/GPU presets and JSON files, and profile files
 * (src/model.h, src/profile.h): round trips, preset lookups, and the
 * messages for bad input.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/model.h"
#include "src/profile.h"

static char tmpdir[] = "/tmp/zb_test_cost_files_XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_presets)
{
    zb_model m;
    zb_err err = { { 0 } };
    const char *names[] = { "1.5B", "6.2B", "14.6B", "28.3B", "llama3-8b", "llama3-70b",
                            "intellect-1-10b", "tiny", "shakespeare-char" };
    for (int i = 0; i < 9; i++) {
        ck_assert_msg(model_preset(names[i], &m, &err) == 0, "%s: %s", names[i], err.msg);
        ck_assert_int_eq(model_check(&m, &err), 0);
        ck_assert_str_eq(m.name, names[i]);
    }
    ck_assert_int_eq(model_preset("intellect-1-10b", &m, &err), 0);
    ck_assert_int_eq(m.n_layers, 42);
    ck_assert_int_eq(m.d_model, 4096);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.d_ff, 14336);
    ck_assert_int_eq(m.vocab, 128256);
    ck_assert_int_eq(model_preset("shakespeare-char", &m, &err), 0);
    ck_assert_int_eq(m.n_layers, 6);
    ck_assert_int_eq(m.d_model, 384);
    ck_assert_int_eq(m.seq_len, 256);
    ck_assert_int_eq(m.vocab, 65);
    ck_assert_int_eq(m.d_ff, 4 * 384);
    ck_assert_int_eq(model_preset("tiny", &m, &err), 0);
    ck_assert_int_eq(m.d_model, 64);
    ck_assert_int_eq(m.seq_len, 64);
    ck_assert_int_eq(model_preset("gpt5", &m, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "llama3-8b"));

    zb_gpu g;
    ck_assert_int_eq(gpu_preset("H100-80G", &g, &err), 0);
    ck_assert_double_eq(g.peak_flops, 989e12);
    ck_assert_int_eq(gpu_load("h200-141g", &g, &err), 0);
    ck_assert(g.mem_bytes > 140e9);
    ck_assert_int_eq(gpu_load("V100", &g, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "A100-80G"));
}
END_TEST

/* The presets users name (issue 29.1), with their datasheet figures
 * (docs/cost-model.md): dense bf16 peak, memory as nvidia-smi / rocm-smi
 * report it, bandwidth per direction, GPUs per NVLink domain. */
START_TEST(test_gpu_presets_datasheets)
{
    static const struct {
        const char *name;
        double peak, mem, link, hbm;
        int per_node;
    } rows[] = {
        { "A100-40G", 312e12, 40960.0 * 1048576, 80e9, 1.555e12, 8 },
        { "H100-94G", 835.5e12, 95830.0 * 1048576, 300e9, 3.9e12, 2 },
        { "H20", 148e12, 97871.0 * 1048576, 450e9, 4.0e12, 8 },
        { "L40S", 362.05e12, 46068.0 * 1048576, 32e9, 0.864e12, 8 },
        { "MI300X", 1307.4e12, 206141652992.0, 64e9, 5.3e12, 8 },
    };
    zb_err err = { { 0 } };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        zb_gpu g;
        ck_assert_msg(gpu_load(rows[i].name, &g, &err) == 0, "%s: %s", rows[i].name, err.msg);
        ck_assert_str_eq(g.name, rows[i].name);
        ck_assert_double_eq(g.peak_flops, rows[i].peak);
        ck_assert_double_eq(g.mem_bytes, rows[i].mem);
        ck_assert_double_eq(g.link_bw, rows[i].link);
        ck_assert_double_eq(g.hbm_bw, rows[i].hbm);
        ck_assert_int_eq(gpu_per_node(&g), rows[i].per_node);
        ck_assert_int_eq(gpu_check(&g, &err), 0);
    }
    /* Names are case-insensitive, as for the older presets. */
    zb_gpu g;
    ck_assert_int_eq(gpu_preset("mi300x", &g, &err), 0);
    ck_assert_str_eq(g.name, "MI300X");
    /* The unknown-GPU message lists the new ones. */
    ck_assert_int_eq(gpu_preset("B200", &g, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "A100-40G"));
    ck_assert_ptr_nonnull(strstr(err.msg, "MI300X"));

    /* Llama 3.1 405B: Meta's config.json, about 405.9 B parameters. */
    zb_model m;
    ck_assert_int_eq(model_preset("llama3-405b", &m, &err), 0);
    ck_assert_int_eq(m.n_layers, 126);
    ck_assert_int_eq(m.d_model, 16384);
    ck_assert_int_eq(m.n_heads, 128);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.d_ff, 53248);
    ck_assert_int_eq(m.vocab, 128256);
    ck_assert_int_eq(m.tied_embedding, 0);
    ck_assert_int_eq(model_check(&m, &err), 0);
}
END_TEST

/* A GPU file without "name" prints as its own file, not as its base
 * preset (issue 29.1): "g.json" edited from H100-80G is "g". */
START_TEST(test_gpu_file_name)
{
    char path[160];
    zb_gpu g;
    zb_err err = { { 0 } };
    snprintf(path, sizeof path, "%s/my-h100.json", tmpdir);
    write_file(path, "{\"base\": \"H100-80G\", \"mem_bytes\": 40e9}");
    ck_assert_msg(gpu_load(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(g.name, "my-h100");
    ck_assert_double_eq(g.mem_bytes, 40e9);
    unlink(path);
    /* Without a base either, and with bytes a name should not carry. */
    snprintf(path, sizeof path, "%s/lab gpu\t1.json", tmpdir);
    write_file(path, "{\"peak_flops\": 1e14, \"mem_bytes\": 1e10, \"link_bw\": 1e10, "
                     "\"link_latency\": 1e-5}");
    ck_assert_msg(gpu_load(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(g.name, "lab_gpu_1");
    unlink(path);
    /* An explicit "name" wins. */
    snprintf(path, sizeof path, "%s/x.json", tmpdir);
    write_file(path, "{\"base\": \"H100-80G\", \"name\": \"H100-IB\"}");
    ck_assert_msg(gpu_load(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(g.name, "H100-IB");
    unlink(path);
}
END_TEST

START_TEST(test_model_json)
{
    char path[128];
    zb_model m, back;
    zb_err err = { { 0 } };
    snprintf(path, sizeof path, "%s/m.json", tmpdir);
    write_file(path, "{\"base\": \"llama3-8b\", \"name\": \"l8-4k\", \"seq_len\": 4096, \"micro_batch\": 2}");
    ck_assert_msg(model_load(path, &m, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(m.name, "l8-4k");
    ck_assert_int_eq(m.seq_len, 4096);
    ck_assert_int_eq(m.micro_batch, 2);
    ck_assert_int_eq(m.n_layers, 32);

    write_file(path, "{\"n_layers\": 2, \"d_model\": 32, \"n_heads\": 2, \"vocab\": 10, \"seq_len\": 8,"
                     " \"dtype\": \"fp32\", \"swiglu\": false}");
    ck_assert_msg(model_load(path, &m, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(m.n_kv_heads, 2);
    ck_assert_int_eq(m.d_ff, 128);
    ck_assert_int_eq(m.swiglu, 0);
    ck_assert_int_eq(m.dtype, ZB_FP32);

    /* Round trip. */
    cJSON *j = model_to_json(&m);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(model_from_json(j, &back, &err), 0);
    cJSON_Delete(j);
    ck_assert_int_eq(memcmp(&m, &back, sizeof m), 0);

    struct { const char *text; const char *msg; } bad[] = {
        { "{\"base\": \"llama3-8b\", \"n_layer\": 3}", "unknown field \"n_layer\"" },
        { "{\"n_layers\": 2}", "needs n_layers" },
        { "{\"base\": \"llama3-8b\", \"n_heads\": 7}", "n_heads" },
        { "{\"base\": \"llama3-8b\", \"n_kv_heads\": 5}", "n_kv_heads" },
        { "{\"base\": \"llama3-8b\", \"seq_len\": 1.5}", "whole number" },
        { "{\"base\": \"llama3-8b\", \"seq_len\": -4}", "out of range" },
        { "{\"base\": \"llama3-8b\", \"dtype\": \"int4\"}", "dtype" },
        { "{\"base\": \"nope\"}", "unknown model" },
        { "[1,2]", "JSON object" },
        { "{\"base\": ", "not valid JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i].text);
        err.msg[0] = '\0';
        ck_assert_msg(model_load(path, &m, &err) == -1, "accepted %s", bad[i].text);
        ck_assert_msg(strstr(err.msg, bad[i].msg), "'%s': message '%s' lacks '%s'", bad[i].text, err.msg, bad[i].msg);
        ck_assert_msg(strstr(err.msg, path) == err.msg, "message should start with the path: %s", err.msg);
    }
    unlink(path);
}
END_TEST

START_TEST(test_gpu_json)
{
    char path[128];
    zb_gpu g;
    zb_err err = { { 0 } };
    snprintf(path, sizeof path, "%s/g.json", tmpdir);
    write_file(path, "{\"base\": \"H100-80G\", \"name\": \"H100-IB\", \"link_bw\": 50e9}");
    ck_assert_msg(gpu_load(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(g.name, "H100-IB");
    ck_assert_double_eq(g.link_bw, 50e9);
    ck_assert_double_eq(g.peak_flops, 989e12);
    write_file(path, "{\"base\": \"H100-80G\", \"efficiency\": 1.5}");
    ck_assert_int_eq(gpu_load(path, &g, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "efficiency"));
    /* Node topology and calibration fields (issue 10), with round trip. */
    write_file(path, "{\"base\": \"H100-80G\", \"gpus_per_node\": 4, \"inter_node_bw\": 25e9, "
                     "\"w_efficiency\": 0.6, \"hbm_bw\": 3e12}");
    ck_assert_msg(gpu_load(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gpu_per_node(&g), 4);
    ck_assert_double_eq(gpu_inter_node_bw(&g), 25e9);
    ck_assert_double_eq(gpu_w_efficiency(&g), 0.6);
    cJSON *j = gpu_to_json(&g);
    zb_gpu back;
    ck_assert_int_eq(gpu_from_json(j, &back, &err), 0);
    cJSON_Delete(j);
    ck_assert_int_eq(back.gpus_per_node, 4);
    ck_assert_double_eq(back.hbm_bw, 3e12);
    write_file(path, "{\"base\": \"H100-80G\", \"w_efficiency\": 2}");
    ck_assert_int_eq(gpu_load(path, &g, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "w_efficiency"));
    unlink(path);
}
END_TEST

START_TEST(test_profile_round_trip)
{
    zb_profile p, q;
    profile_init(&p);
    strcpy(p.model, "tiny");
    strcpy(p.hardware, "cpu");
    p.micro_batch = 4;
    p.seq_len = 64;
    p.recompute = 1;
    p.layer = (profile_part){ 1.25e-4, 1.5e-4, 0.1, 1048576, 786432 };
    p.embedding = (profile_part){ 1e-6, 0, 3e-6, 2048, 4096 };
    p.head = (profile_part){ 2e-5, 2e-5, 2.5e-5, 66560, 33280 };
    p.t_comm = 0.3333333333333333;
    char path[128];
    zb_err err = { { 0 } };
    snprintf(path, sizeof path, "%s/p.json", tmpdir);
    ck_assert_msg(profile_save(&p, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(profile_load(path, &q, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(memcmp(&p, &q, sizeof p), 0);
    unlink(path);
}
END_TEST

START_TEST(test_profile_rejects)
{
    const char *good_parts =
        "\"layer\": {\"t_f\": 1, \"t_b\": 1, \"t_w\": 1, \"m_b\": 1, \"m_w\": 1},"
        "\"embedding\": {\"t_f\": 0, \"t_b\": 0, \"t_w\": 0, \"m_b\": 0, \"m_w\": 0},"
        "\"head\": {\"t_f\": 1, \"t_b\": 1, \"t_w\": 1, \"m_b\": 1, \"m_w\": 1}";
    char doc[1024];
    zb_profile p;
    zb_err err = { { 0 } };
    snprintf(doc, sizeof doc, "{\"format\": \"zbsched-profile\", \"version\": 1, \"micro_batch\": 1, \"seq_len\": 8, %s}", good_parts);
    ck_assert_msg(profile_parse(doc, strlen(doc), &p, &err) == 0, "%s", err.msg);
    ck_assert_double_eq(p.t_comm, -1);

    struct { const char *head; const char *msg; } bad[] = {
        { "\"format\": \"zbsched-schedule\", \"version\": 1, \"micro_batch\": 1, \"seq_len\": 8", "not a profile" },
        { "\"format\": \"zbsched-profile\", \"version\": 2, \"micro_batch\": 1, \"seq_len\": 8", "version" },
        { "\"format\": \"zbsched-profile\", \"version\": 1, \"micro_batch\": 0, \"seq_len\": 8", "micro_batch" },
        { "\"format\": \"zbsched-profile\", \"version\": 1, \"micro_batch\": 1, \"seq_len\": 8, \"t_comm\": -1", "t_comm" },
        { "\"format\": \"zbsched-profile\", \"version\": 1, \"micro_batch\": 1, \"seq_len\": 8, \"tcomm\": 1", "unknown field" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(doc, sizeof doc, "{%s, %s}", bad[i].head, good_parts);
        ck_assert_msg(profile_parse(doc, strlen(doc), &p, &err) == -1, "accepted %s", doc);
        ck_assert_msg(strstr(err.msg, bad[i].msg), "message '%s' lacks '%s'", err.msg, bad[i].msg);
    }
    const char *missing = "{\"format\": \"zbsched-profile\", \"version\": 1, \"micro_batch\": 1, \"seq_len\": 8,"
                          "\"layer\": {\"t_f\": 1, \"t_b\": 1, \"t_w\": 1, \"m_b\": 1}}";
    ck_assert_int_eq(profile_parse(missing, strlen(missing), &p, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "m_w"));
    ck_assert_int_eq(profile_load("/nonexistent/p.json", &p, &err), -1);
}
END_TEST

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("cost_files");
    TCase *tc = tcase_create("files");
    tcase_add_test(tc, test_presets);
    tcase_add_test(tc, test_gpu_presets_datasheets);
    tcase_add_test(tc, test_gpu_file_name);
    tcase_add_test(tc, test_model_json);
    tcase_add_test(tc, test_gpu_json);
    tcase_add_test(tc, test_profile_round_trip);
    tcase_add_test(tc, test_profile_rejects);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rmdir(tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
