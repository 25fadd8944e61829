/* Checkpoints: round trip of weights, moments and run state; other tools'
 * files (F16/BF16, extra tensors); and hostile headers, each a clean error. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "catchat/checkpoint.h"
#include "catchat/safetensors.h"
#include "catchat/version.h"
#include "helpers.h"

static void tiny_layout(cc_config *c, cc_layout *lay)
{
    th_tiny_config(c);
    cc_dims d = cc_dims_from_config(c);
    cc_layout_build(lay, &d);
}

Test(checkpoint, round_trip_with_state)
{
    cc_config c;
    cc_layout lay;
    tiny_layout(&c, &lay);
    const size_t n = lay.total;
    float *p = malloc(4 * n), *m = malloc(4 * n), *v = malloc(4 * n);
    cc_layout_init_params(&lay, p, 1);
    cc_layout_init_params(&lay, m, 2);
    cc_layout_init_params(&lay, v, 3);
    cc_run_state st = { 0 };
    st.step = 17;
    st.counts.applied = 15;
    st.counts.skipped = 2;
    st.scaler.scale = 32768;
    st.scaler.growth_count = 5;
    st.data_pos = 17;
    st.running_loss = 2.345678901234;
    st.best_eval = 1.9876543210987;
    st.best_step = 12;
    st.rising = 1;
    st.last_eval = 2.0123456789;
    st.last_train = 1.7;
    st.rise_from_eval = 1.99;
    st.rise_from_train = 1.8;
    st.train_digest = 0x1234;
    st.val_digest = 0x5678;
    st.data_order = CC_ORDER_FEISTEL;
    cc_rng_seed(&st.rng, 77);
    char path[512];
    th_tmp_path(path, sizeof(path), "ck.safetensors");
    c.lr = 1.25e-3;
    cr_assert_eq(cc_checkpoint_save(path, &c, &lay, p, m, v, &st), 0);
    float *p2 = calloc(n, 4), *m2 = calloc(n, 4), *v2 = calloc(n, 4);
    cc_run_state st2 = { 0 };
    int hm, hs;
    cr_assert_eq(cc_checkpoint_load(path, &lay, p2, m2, v2, &hm, &st2, &hs), 0);
    cr_expect(hm && hs);
    cr_expect_eq(memcmp(p, p2, 4 * n), 0);
    cr_expect_eq(memcmp(m, m2, 4 * n), 0);
    cr_expect_eq(memcmp(v, v2, 4 * n), 0);
    cr_expect_eq(st2.step, 17);
    cr_expect_eq(st2.counts.applied, 15);
    cr_expect_eq(st2.counts.skipped, 2);
    cr_expect_eq(st2.scaler.scale, 32768.0);
    cr_expect_eq(st2.scaler.growth_count, 5);
    cr_expect_eq(st2.data_pos, 17);
    cr_expect_eq(st2.running_loss, st.running_loss);
    cr_expect_eq(st2.best_eval, st.best_eval);
    cr_expect_eq(st2.best_step, 12);
    cr_expect_eq(st2.rising, 1);
    cr_expect_eq(st2.last_eval, st.last_eval);
    cr_expect_eq(st2.last_train, st.last_train);
    cr_expect_eq(st2.rise_from_eval, st.rise_from_eval);
    cr_expect_eq(st2.rise_from_train, st.rise_from_train);
    cr_expect_eq(memcmp(&st.rng, &st2.rng, sizeof(st.rng)), 0);
    cr_expect_eq(st2.train_digest, 0x1234);
    cr_expect_eq(st2.val_digest, 0x5678);
    cr_expect_eq(st2.data_order, CC_ORDER_FEISTEL);
    /* a checkpoint from before the keyed order: its run goes on with the Fisher-Yates array */
    st.data_order = CC_ORDER_SHUFFLED_ARRAY;
    cr_assert_eq(cc_checkpoint_save(path, &c, &lay, p, m, v, &st), 0);
    st2.data_order = CC_ORDER_FEISTEL;
    cr_assert_eq(cc_checkpoint_load(path, &lay, p2, m2, v2, &hm, &st2, &hs), 0);
    cr_expect_eq(st2.data_order, CC_ORDER_SHUFFLED_ARRAY);
    cc_config c2;
    cc_config_defaults(&c2);
    cr_expect_eq(cc_checkpoint_read_config(path, &c2), 1);
    cr_expect_eq(c2.lr, 1.25e-3);
    cr_expect_eq(c2.d_model, 64);
    free(p); free(m); free(v); free(p2); free(m2); free(v2);
}

/* A file as another tool writes it: F16 and BF16 tensors, reordered, with an
 * extra tensor and no metadata. */
Test(checkpoint, loads_foreign_f16_bf16)
{
    cc_config c;
    cc_layout lay;
    tiny_layout(&c, &lay);
    float *p = malloc(4 * lay.total);
    cc_layout_init_params(&lay, p, 9);
    cc_st_entry *e = calloc((size_t)lay.n + 1, sizeof(cc_st_entry));
    uint16_t **bufs = calloc((size_t)lay.n, sizeof(uint16_t *));
    for (int i = 0; i < lay.n; i++) {
        const cc_tensor_info *t = &lay.t[lay.n - 1 - i]; /* reversed order */
        const int bf = i % 2;
        bufs[i] = malloc(2 * t->numel);
        for (size_t k = 0; k < t->numel; k++) {
            float f = p[t->offset + k];
            uint32_t u;
            memcpy(&u, &f, 4);
            bufs[i][k] = bf ? (uint16_t)(u >> 16) : cc_float_to_half(f);
        }
        e[i] = (cc_st_entry){ t->name, bf ? ST_BF16 : ST_F16, t->ndim, { t->shape[0], t->shape[1] }, bufs[i] };
    }
    int32_t extra[3] = { 1, 2, 3 };
    e[lay.n] = (cc_st_entry){ "something.else", ST_I32, 1, { 3 }, extra };
    char path[512];
    th_tmp_path(path, sizeof(path), "foreign.safetensors");
    cr_assert_eq(cc_st_write(path, e, lay.n + 1, NULL, NULL, 0), 0);
    float *q = calloc(lay.total, 4);
    int hs = 1;
    cc_run_state st;
    cr_assert_eq(cc_checkpoint_load(path, &lay, q, NULL, NULL, NULL, &st, &hs), 0);
    cr_expect_eq(hs, 0);
    cr_expect(th_rel_err_f(q, p, lay.total) < 5e-3, "rel err %.3e", th_rel_err_f(q, p, lay.total));
    for (int i = 0; i < lay.n; i++) free(bufs[i]);
    free(bufs); free(e); free(p); free(q);
}

static void expect_bad(const char *dir, const char *name, const void *bytes, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    th_write_file(path, bytes, len);
    cc_st_file f;
    cr_expect_neq(cc_st_open(&f, path), 0, "accepted %s", name);
}

static size_t with_header(uint8_t *buf, const char *json, size_t data_bytes)
{
    const uint64_t n = strlen(json);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, json, n);
    memset(buf + 8 + n, 0, data_bytes);
    return 8 + n + data_bytes;
}

Test(checkpoint, hostile_headers_are_errors, .init = cr_redirect_stderr)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    uint8_t buf[4096];
    size_t n;
    const uint8_t huge[16] = { 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}' };
    expect_bad(dir, "len_past_end", huge, sizeof(huge));
    expect_bad(dir, "short", "abc", 3);
    n = with_header(buf, "[1,2,3]", 0);
    expect_bad(dir, "not_object", buf, n);
    n = with_header(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
    expect_bad(dir, "overlap", buf, n);
    n = with_header(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    expect_bad(dir, "size_mismatch", buf, n);
    n = with_header(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
    expect_bad(dir, "past_data", buf, n);
    n = with_header(buf, "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_bad(dir, "dtype", buf, n);
    n = with_header(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
    expect_bad(dir, "neg_shape", buf, n);
    n = with_header(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    expect_bad(dir, "reversed", buf, n);
    n = with_header(buf, "{\"__metadata__\":{\"k\":3}}", 0);
    expect_bad(dir, "meta_not_string", buf, n);
    n = with_header(buf, "{\"a\":", 0);
    expect_bad(dir, "truncated_json", buf, n);
    /* 2^40 · 2^24 elements: a product that wraps to 0 and so would match empty data */
    n = with_header(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,16777216],\"data_offsets\":[0,0]}}", 0);
    expect_bad(dir, "shape_product_wraps", buf, n);
}

Test(checkpoint, missing_tensor_and_wrong_shape_name_the_tensor, .init = cr_redirect_stderr)
{
    cc_config c;
    cc_layout lay, small;
    tiny_layout(&c, &lay);
    float *p = calloc(lay.total, 4);
    char path[512];
    th_tmp_path(path, sizeof(path), "ck.safetensors");
    cr_assert_eq(cc_checkpoint_save(path, &c, &lay, p, NULL, NULL, NULL), 0);
    c.d_model = 32;
    cc_dims d = cc_dims_from_config(&c);
    cc_layout_build(&small, &d);
    cr_expect_neq(cc_checkpoint_load(path, &small, p, NULL, NULL, NULL, NULL, NULL), 0);
    c.n_layers = 3;
    c.d_model = 64;
    d = cc_dims_from_config(&c);
    cc_layout_build(&small, &d);
    float *q = calloc(small.total, 4);
    cr_expect_neq(cc_checkpoint_load(path, &small, q, NULL, NULL, NULL, NULL, NULL), 0);
    fflush(stderr);
    char want[2048];
    snprintf(want, sizeof(want),
             "catchat: %s: tensor 'embed.weight' has shape [256, 64], the config needs [256, 32]\n"
             "catchat: %s: missing tensor 'gru.2.norm.weight'\n", path, path);
    cr_expect_stderr_eq_str(want);
    free(p);
    free(q);
}

/* cc_st_write stores an xxh64 of the data section under __metadata__
 * "data_xxh64" (16 hex digits), even when given no metadata. */
Test(safetensors, writer_stores_data_checksum)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "a.safetensors");
    const float a[4] = { 1, 2, 3, 4 };
    const cc_st_entry e = { "a", ST_F32, 1, { 4 }, a };
    cr_assert_eq(cc_st_write(path, &e, 1, NULL, NULL, 0), 0);
    cc_st_file f;
    cr_assert_eq(cc_st_open(&f, path), 0);
    const char *sum = cc_st_meta(&f, "data_xxh64");
    cr_assert_not_null(sum, "no data_xxh64 in __metadata__");
    cr_expect_eq(strlen(sum), 16);
    cr_expect_eq(strspn(sum, "0123456789abcdef"), 16, "not 16 hex digits: %s", sum);
    cc_st_close(&f);
}

/* A flipped byte inside tensor data would load as silently wrong weights:
 * the stored checksum refuses it ("checksum mismatch"). */
Test(safetensors, flipped_data_byte_is_checksum_mismatch)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "a.safetensors");
    const float a[4] = { 1, 2, 3, 4 }, b[2] = { 5, 6 };
    const cc_st_entry e[2] = { { "a", ST_F32, 1, { 4 }, a }, { "b", ST_F32, 1, { 2 }, b } };
    cr_assert_eq(cc_st_write(path, e, 2, NULL, NULL, 0), 0);
    size_t len;
    char *bytes = th_read_file(path, &len);
    bytes[len - 10] ^= 0x40; /* inside tensor a's data (the last 24 bytes) */
    th_write_file(path, bytes, len);
    free(bytes);
    cc_st_file f;
    th_stderr_begin();
    const int rc = cc_st_open(&f, path);
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0, "damaged data accepted");
    cr_expect(strstr(err, path) && strstr(err, "checksum mismatch"), "message: %s", err);
}

/* The checksum is checked only when present: a file written by another
 * tool (no data_xxh64) opens, the same bytes under a wrong data_xxh64 do not. */
Test(safetensors, checksum_checked_only_when_present)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "foreign.safetensors");
    const float data[2] = { 1.5f, -2.25f };
    const char *headers[2] = {
        "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{\"__metadata__\":{\"data_xxh64\":\"0123456789abcdef\"},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    };
    for (int k = 0; k < 2; k++) {
        uint8_t buf[512];
        const uint64_t n = strlen(headers[k]);
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
        memcpy(buf + 8, headers[k], n);
        memcpy(buf + 8 + n, data, 8);
        th_write_file(path, buf, 16 + n);
        cc_st_file f;
        th_stderr_begin();
        const int rc = cc_st_open(&f, path);
        const char *err = th_stderr_end();
        if (k == 0) {
            cr_assert_eq(rc, 0, "a file without data_xxh64 refused: %s", err);
            float got[2];
            cr_expect_eq(cc_st_read_float(&f, cc_st_find(&f, "w"), got), 0);
            cr_expect(got[0] == 1.5f && got[1] == -2.25f);
            cc_st_close(&f);
        } else {
            cr_expect_neq(rc, 0, "a wrong data_xxh64 accepted");
            cr_expect(strstr(err, "checksum mismatch") != NULL, "message: %s", err);
        }
    }
}

/* A text file given as safetensors is "not a safetensors file": its first 8
 * bytes taken as a header length would only say that length runs past the end. */
Test(safetensors, text_file_is_not_safetensors)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "notes.txt");
    const char *text = "step,loss\n1,5.5\n2,5.4\n";
    th_write_file(path, text, strlen(text));
    cc_st_file f;
    th_stderr_begin();
    const int rc = cc_st_open(&f, path);
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err, path) && strstr(err, "not a safetensors file"), "message: %s", err);
}

/* Weights or moments holding NaN or Inf would load and then train nothing:
 * the checkpoint is refused, naming the tensor and the element. */
Test(checkpoint, nonfinite_tensor_is_refused)
{
    cc_config c;
    cc_layout lay;
    tiny_layout(&c, &lay);
    const size_t n = lay.total;
    float *p = malloc(4 * n), *m = calloc(n, 4), *v = calloc(n, 4);
    cc_layout_init_params(&lay, p, 1);
    const cc_tensor_info *t = &lay.t[2];
    p[t->offset + 3] = NAN;
    char path[512], want[1024];
    th_tmp_path(path, sizeof(path), "nan.safetensors");
    cr_assert_eq(cc_checkpoint_save(path, &c, &lay, p, NULL, NULL, NULL), 0);
    float *q = calloc(n, 4);
    th_stderr_begin();
    int rc = cc_checkpoint_load(path, &lay, q, NULL, NULL, NULL, NULL, NULL);
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0, "a NaN weight loaded");
    snprintf(want, sizeof(want), "%s: tensor '%s' holds NaN at element 3", path, t->name);
    cr_expect(strstr(err, want) != NULL, "message: %s\nwanted: %s", err, want);

    p[t->offset + 3] = 0.5f; /* weights fine, a second moment infinite */
    v[lay.t[0].offset] = INFINITY;
    cr_assert_eq(cc_checkpoint_save(path, &c, &lay, p, m, v, NULL), 0);
    th_stderr_begin();
    rc = cc_checkpoint_load(path, &lay, q, m, v, NULL, NULL, NULL);
    err = th_stderr_end();
    cr_expect_neq(rc, 0, "an Inf moment loaded");
    snprintf(want, sizeof(want), "tensor 'opt.v.%s' holds Inf at element 0", lay.t[0].name);
    cr_expect(strstr(err, want) != NULL, "message: %s\nwanted: %s", err, want);
    free(p); free(m); free(v); free(q);
}

/* Checkpoints record the catchat version in __metadata__, with and without
 * run state. */
Test(checkpoint, records_catchat_version)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "ck.safetensors");
    for (int with_state = 0; with_state < 2; with_state++) {
        cr_assert_eq(th_save_tiny_checkpoint(path, with_state ? 3 : -1), 0);
        cc_st_file f;
        cr_assert_eq(cc_st_open(&f, path), 0);
        const char *ver = cc_st_meta(&f, "catchat_version");
        cr_expect(ver && strcmp(ver, cc_version()) == 0, "catchat_version = %s, want %s (with state: %d)",
                  ver ? ver : "(absent)", cc_version(), with_state);
        cr_expect_eq(cc_st_meta(&f, "step") != NULL, with_state);
        cc_st_close(&f);
    }
}

/* Blank out `"key":"value"` (and the comma before it) of a written header
 * with spaces: the file keeps its length and stays valid JSON, as a file of
 * an older catchat or another tool would hold it without that key. */
static void blank_meta_key(char *bytes, size_t len, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), ",\"%s\":\"", key);
    char *p = memmem(bytes, len, pat, strlen(pat));
    cr_assert_not_null(p, "no %s in the header", key);
    char *end = strchr(p + strlen(pat), '"');
    memset(p, ' ', (size_t)(end + 1 - p));
}

/* A digit of the metadata changed (a step, a value inside the stored config)
 * still parses, so only a checksum over the metadata can catch it: the
 * writer stores header_xxh64 and the reader refuses the damaged file. */
Test(safetensors, damaged_metadata_is_checksum_mismatch)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "meta.safetensors");
    const float a[4] = { 1, 2, 3, 4 };
    const cc_st_entry e = { "a", ST_F32, 1, { 4 }, a };
    const char *keys[2] = { "step", "config" }, *vals[2] = { "40", "{\"train\":{\"lr\":0.001}}" };
    cr_assert_eq(cc_st_write(path, &e, 1, keys, vals, 2), 0);
    cc_st_file f;
    cr_assert_eq(cc_st_open(&f, path), 0);
    const char *hs = cc_st_meta(&f, CC_ST_HEADER_CHECKSUM_KEY);
    cr_assert(hs && strlen(hs) == 16 && strspn(hs, "0123456789abcdef") == 16, "header_xxh64 = %s", hs ? hs : "(absent)");
    cc_st_close(&f);
    size_t len;
    char *orig = th_read_file(path, &len), *bytes = malloc(len);
    const char *where[3] = { "\"40\"", "0.001", "\"shape\":[4]" };
    for (int k = 0; k < 3; k++) {
        memcpy(bytes, orig, len);
        char *p = memmem(bytes, len, where[k], strlen(where[k]));
        cr_assert_not_null(p);
        p[k == 2 ? 9 : 1] = k == 2 ? '4' : '5'; /* step 50; lr 0.501; the shape stays [4]: a control */
        th_write_file(path, bytes, len);
        th_stderr_begin();
        const int rc = cc_st_open(&f, path);
        const char *err = th_stderr_end();
        if (k == 2) {
            cr_expect_eq(rc, 0, "an unchanged header refused: %s", err);
            if (rc == 0) cc_st_close(&f);
        } else {
            cr_expect_neq(rc, 0, "a damaged %s accepted", where[k]);
            cr_expect(strstr(err, path) && strstr(err, "checksum mismatch"), "message: %s", err);
        }
    }
    /* an older catchat's file: the data checksum alone, still checked, and it loads */
    memcpy(bytes, orig, len);
    blank_meta_key(bytes, len, CC_ST_HEADER_CHECKSUM_KEY);
    th_write_file(path, bytes, len);
    th_stderr_begin();
    int rc = cc_st_open(&f, path);
    const char *err = th_stderr_end();
    cr_expect_eq(rc, 0, "a file with only data_xxh64 refused: %s", err);
    if (rc == 0) cc_st_close(&f);
    bytes[len - 1] ^= 0x40;
    th_write_file(path, bytes, len);
    th_stderr_begin();
    rc = cc_st_open(&f, path);
    err = th_stderr_end();
    cr_expect(rc != 0 && strstr(err, "checksum mismatch"), "damaged data under data_xxh64 alone: %s", err);
    /* a tool that rewrote the tensors and dropped the stale data checksum: the header one still holds */
    memcpy(bytes, orig, len);
    blank_meta_key(bytes, len, CC_ST_CHECKSUM_KEY);
    bytes[len - 1] ^= 0x40;
    th_write_file(path, bytes, len);
    th_stderr_begin();
    rc = cc_st_open(&f, path);
    err = th_stderr_end();
    cr_expect_eq(rc, 0, "a file without data_xxh64 refused: %s", err);
    if (rc == 0) cc_st_close(&f);
    free(bytes);
    free(orig);
}

/* header_xxh64 is the xxh64 of the byte string safetensors.h spells out, so
 * a tool in another language can check it; neither the order of the keys
 * nor that of the tensors changes it. */
Test(safetensors, header_digest_is_the_documented_form)
{
    const char *k1[3] = { "step", "data_xxh64", "config" }, *v1[3] = { "7", "0123456789abcdef", "{}" };
    const char *k2[2] = { "config", "step" }, *v2[2] = { "{}", "7" };
    cc_st_tensor t1[2] = { { .name = "w", .dtype = ST_F32, .ndim = 2, .shape = { 2, 3 }, .begin = 0, .end = 24 },
                           { .name = "b", .dtype = ST_F16, .ndim = 0, .begin = 24, .end = 26 } };
    cc_st_tensor t2[2] = { t1[1], t1[0] };
    static const char want[] = "m\0config\0{}\0m\0step\0" "7\0"
                               "t\0b\0F16\0\0" "24,26\0t\0w\0F32\0" "2,3\0" "0,24";
    const uint64_t d = cc_st_header_digest(k1, v1, 3, t1, 2);
    cr_expect_eq(d, XXH64(want, sizeof(want), 0), "not the documented form");
    cr_expect_eq(d, cc_st_header_digest(k2, v2, 2, t2, 2), "order matters");
    t2[0].end = 27;
    cr_expect_neq(d, cc_st_header_digest(k2, v2, 2, t2, 2), "an offset is not covered");
}

/* What cli_resolve_config asks before it trusts a checkpoint's config: the
 * whole file verified, and whether weights fit another model (--init). */
Test(checkpoint, verify_and_fits)
{
    char path[512];
    th_tmp_path(path, sizeof(path), "ck.safetensors");
    cr_assert_eq(th_save_tiny_checkpoint(path, 3), 0);
    cr_expect_eq(cc_checkpoint_verify(path), 0);
    cc_config c;
    cc_layout lay;
    tiny_layout(&c, &lay);
    cr_expect_eq(cc_checkpoint_fits(path, &lay), 1);
    const int keep[] = { 1, 1, 1, 0, 0 }; /* n_heads, seq_len: no shape; d_model, vocab_size: shapes */
    for (int k = 0; k < 5; k++) {
        cc_config o = c;
        if (k == 0) o.n_heads = c.n_heads * 2;
        if (k == 1) o.seq_len = c.seq_len / 2;
        if (k == 2) o.n_layers = c.n_layers - 1; /* fewer layers: the file's extra ones unused */
        if (k == 3) o.d_model = c.d_model / 2;
        if (k == 4) o.vocab_size = c.vocab_size + 1;
        cc_dims d = cc_dims_from_config(&o);
        cc_layout other;
        cc_layout_build(&other, &d);
        cr_expect_eq(cc_checkpoint_fits(path, &other), keep[k], "case %d", k);
    }
    size_t len;
    char *bytes = th_read_file(path, &len);
    bytes[len - 1] ^= 0x40;
    th_write_file(path, bytes, len);
    free(bytes);
    th_stderr_begin();
    const int rc = cc_checkpoint_verify(path);
    const char *err = th_stderr_end();
    cr_expect(rc != 0 && strstr(err, "checksum mismatch"), "damaged file verified: %s", err);
}
