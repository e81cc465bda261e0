/*
 * test_safetensors.c: the safetensors reader and writer
 * (runtime/safetensors.h).
 *
 *   - F32 and BF16 round trips (BF16 rounded to nearest even, NaN kept);
 *   - the file layout byte for byte: little-endian length, a header padded
 *     to 8 bytes, offsets tiling the data;
 *   - refusals, each one line naming what is wrong: every truncation of a
 *     valid file, headers whose offsets lie (past the end, span not
 *     matching the shape, overlapping, leaving holes), an unsupported
 *     dtype, a missing field, a huge header length, bytes after the JSON,
 *     duplicate keys, a non-string metadata value; and a tensor that is
 *     not there is not found;
 *   - a small fuzz: random byte flips of a valid file either load with
 *     consistent tensors or are refused, never crash (run under ASan in
 *     the sanitizer build).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/safetensors.h"

static char path[256];

static void setup(void)
{
    snprintf(path, sizeof path, "/tmp/zb_st_%d.safetensors", (int)getpid());
}

static void teardown(void)
{
    unlink(path);
}

static void write_bytes(const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static unsigned char *read_bytes(size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* A file of header text and data_len bytes of data (zeros). */
static void write_file(const char *header, size_t data_len)
{
    size_t h = strlen(header);
    unsigned char *b = calloc(8 + h + data_len + 1, 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    write_bytes(b, 8 + h + data_len);
    free(b);
}

static void expect_refused(const char *frag)
{
    st_file f;
    zb_err err = { { 0 } };
    ck_assert_msg(st_open(path, &f, &err) == -1, "accepted, wanted '%s'", frag);
    ck_assert_msg(strstr(err.msg, frag) != NULL, "'%s' not in '%s'", frag, err.msg);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    ck_assert_int_eq(f.fd, -1);
}

static const float mat[6] = { 1.0f, -2.5f, 3.25f, 1e-20f, -0.0f, 65504.0f };
static const float vec[3] = { 0.5f, 7.0f, -1.0f };

static void write_two(st_dtype dtype)
{
    st_entry e[2] = { { "m", 2, 3, mat }, { "v", 0, 3, vec } };
    zb_err err = { { 0 } };
    ck_assert_msg(st_write(path, e, 2, dtype, &err) == 0, "%s", err.msg);
}

START_TEST(f32_round_trip_and_layout)
{
    write_two(ST_F32);
    size_t n;
    unsigned char *b = read_bytes(&n);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | b[i];
    ck_assert_uint_eq((8 + h) % 8, 0);
    ck_assert_uint_eq(n, 8 + h + 9 * 4);
    /* little-endian 1.0f = 00 00 80 3f right after the header */
    ck_assert_int_eq(b[8 + h + 2], 0x80);
    ck_assert_int_eq(b[8 + h + 3], 0x3f);
    ck_assert_ptr_nonnull(memmem(b + 8, h, "\"__metadata__\":{\"format\":\"pt\"}", 30));
    free(b);

    st_file f;
    zb_err err = { { 0 } };
    ck_assert_msg(st_open(path, &f, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.n, 2);
    const st_tensor *m = st_find(&f, "m"), *v = st_find(&f, "v");
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_null(st_find(&f, "missing"));
    ck_assert_int_eq(m->n_dims, 2);
    ck_assert_int_eq(m->shape[0], 2);
    ck_assert_int_eq(m->shape[1], 3);
    ck_assert_int_eq(v->n_dims, 1);
    float got[6];
    ck_assert_int_eq(st_read_f32(&f, m, got, &err), 0);
    ck_assert_int_eq(memcmp(got, mat, sizeof mat), 0);
    ck_assert_int_eq(st_read_f32(&f, v, got, &err), 0);
    ck_assert_int_eq(memcmp(got, vec, sizeof vec), 0);
    st_close(&f);
}
END_TEST

START_TEST(bf16_rounds_to_nearest_even)
{
    /* 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to even (1);
     * 1 + 3*2^-8 goes up to 1 + 2^-6 (even); NaN stays NaN. */
    const float in[4] = { 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, NAN, -3.0f };
    const float want[4] = { 1.0f, 1.0f + 0x1p-6f, NAN, -3.0f };
    st_entry e = { "x", 0, 4, in };
    zb_err err = { { 0 } };
    ck_assert_int_eq(st_write(path, &e, 1, ST_BF16, &err), 0);
    st_file f;
    ck_assert_msg(st_open(path, &f, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.t[0].dtype, ST_BF16);
    ck_assert_uint_eq(f.t[0].end - f.t[0].begin, 8);
    float got[6];
    ck_assert_int_eq(st_read_f32(&f, &f.t[0], got, &err), 0);
    for (int i = 0; i < 4; i++) {
        if (isnan(want[i]))
            ck_assert(isnan(got[i]));
        else
            ck_assert_float_eq(got[i], want[i]);
    }
    st_close(&f);
    write_two(ST_BF16);
    ck_assert_int_eq(st_open(path, &f, &err), 0);
    ck_assert_int_eq(st_read_f32(&f, st_find(&f, "m"), got, &err), 0);
    ck_assert_float_eq(got[1], -2.5f);
    st_close(&f);
}
END_TEST

START_TEST(every_truncation_refused)
{
    write_two(ST_F32);
    size_t n;
    unsigned char *b = read_bytes(&n);
    for (size_t k = 0; k < n; k++) {
        write_bytes(b, k);
        st_file f;
        zb_err err = { { 0 } };
        ck_assert_msg(st_open(path, &f, &err) == -1, "a %zu-byte prefix of %zu loaded", k, n);
        ck_assert(strstr(err.msg, "truncated") || strstr(err.msg, "belong to no tensor") ||
                  strstr(err.msg, "ends at byte"));
    }
    free(b);
}
END_TEST

START_TEST(header_lies_refused)
{
    static const struct { const char *header; size_t data; const char *frag; } cases[] = {
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
          "tensor 'a' ends at byte 8 of the data, which has 4 bytes" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
          "tensor 'a': 3 F32 values need 12 bytes, its data_offsets [0, 8] span 8" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
          "tensors 'a' and 'b' overlap" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
          "bytes 0..4 of the data belong to no tensor" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
          "bytes 4..8 of the data belong to no tensor" },
        { "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
          "tensor 'a' has the dtype F16; zbsched reads F32 and BF16" },
        { "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
          "an unknown dtype Q4" },
        { "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a' has no dtype" },
        { "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "tensor 'a' has no shape" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a' has no data_offsets" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin <= end" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
          "not a whole number" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'a'" },
        { "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__ 'format' is not a string" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}xx", 8,
          "bytes after its JSON object" },
        { "[1, 2]", 0, "not a JSON object" },
        { "{\"a\": ", 0, "not JSON" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(cases[i].header, cases[i].data);
        expect_refused(cases[i].frag);
    }
    /* a header length larger than the file, or absurd */
    unsigned char big[16] = { 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, '{', '}' };
    write_bytes(big, 10);
    expect_refused("out of range");
    unsigned char lie[16] = { 100, 0, 0, 0, 0, 0, 0, 0, '{', '}' };
    write_bytes(lie, 10);
    expect_refused("truncated: the header claims 100 bytes and 2 follow");
    /* padding with spaces is fine, and so is an empty file of tensors */
    write_file("{}      ", 0);
    st_file f;
    zb_err err = { { 0 } };
    ck_assert_msg(st_open(path, &f, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.n, 0);
    st_close(&f);
    /* a directory is not a file */
    ck_assert_int_eq(st_open("/tmp", &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
}
END_TEST

START_TEST(names_given_twice_refused_by_the_writer)
{
    st_entry e[2] = { { "m", 2, 3, mat }, { "m", 0, 3, vec } };
    zb_err err = { { 0 } };
    ck_assert_int_eq(st_write(path, e, 2, ST_F32, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "given twice"));
    ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

START_TEST(byte_flips_never_crash)
{
    write_two(ST_F32);
    size_t n;
    unsigned char *b = read_bytes(&n);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    int loaded = 0, refused = 0;
    for (int round = 0; round < 400; round++) {
        unsigned char *c = malloc(n);
        memcpy(c, b, n);
        for (int k = 0; k < 3; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* mostly the length and the header, where the lies are */
            size_t at = (size_t)(x % (n < 200 ? n : 200));
            c[at] = (unsigned char)(x >> 32);
        }
        write_bytes(c, n);
        free(c);
        st_file f;
        zb_err err = { { 0 } };
        if (st_open(path, &f, &err) == 0) {
            loaded++;
            for (int i = 0; i < f.n; i++) {
                ck_assert(f.t[i].end <= f.data_len);
                float *dst = malloc(sizeof(float) * (size_t)(f.t[i].count + 1));
                ck_assert_int_eq(st_read_f32(&f, &f.t[i], dst, &err), 0);
                free(dst);
            }
            st_close(&f);
        } else {
            refused++;
            ck_assert(err.msg[0] != '\0');
            ck_assert_ptr_null(strchr(err.msg, '\n'));
        }
    }
    ck_assert_int_gt(refused, 0);
    (void)loaded;
    free(b);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, f32_round_trip_and_layout);
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, every_truncation_refused);
    tcase_add_test(tc, header_lies_refused);
    tcase_add_test(tc, names_given_twice_refused_by_the_writer);
    tcase_add_test(tc, byte_flips_never_crash);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
