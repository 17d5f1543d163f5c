/*
 * libFuzzer harness of the NDJSON scanner and the document framer (scan_core.h, frame_core.h),
 * built with AddressSanitizer, UBSan and LeakSanitizer (make fuzz).
 *
 * Input: 3 bytes of settings (room, cell budget, known keys), then the text. Checked on every
 * input, besides memory safety and leaks:
 * - scanning the text in pieces (as the cell budget cuts it) finds the same rows and bad lines,
 *   line for line, as one scan without a budget, and every piece but the last makes progress;
 * - every column's offsets rise from 0 to its data's length, and no piece holds more cells than
 *   its budget allows (one line excepted);
 * - the framer, fed the same text in blocks of any size, yields records whose start lines rise
 *   and stay within the text's lines, and its records scan without error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ndjson_arrow/frame_core.h"
#include "../ndjson_arrow/scan_core.h"

static const char *KNOWN[] = {"a", "b", "k0", "\xc3\xa9", ""};

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    int64_t *lines; /* rows' line numbers */
    size_t rows, cap;
    int64_t *bad; /* bad lines' numbers and reasons */
    size_t nbad, bad_cap;
} Seen;

static void seen_add(int64_t **p, size_t *n, size_t *cap, int64_t v) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *p = realloc(*p, *cap * sizeof(int64_t));
        CHECK(*p != NULL);
    }
    (*p)[(*n)++] = v;
}

static void check_columns(const Scan *s) {
    for (ptrdiff_t k = 0; k < s->nkeys; k++) {
        const Key *key = &s->keys[k];
        if (key->spilled || key->ncells == 0 || s->rows == 0) continue;
        int32_t *offsets;
        uint8_t *valid;
        CHECK(column_build(s, key, &offsets, &valid) == 0);
        CHECK(offsets[0] == 0);
        for (int64_t r = 0; r < s->rows; r++) CHECK(offsets[r + 1] >= offsets[r]);
        CHECK((size_t)offsets[s->rows] == key->data.len);
        free(offsets);
        free(valid);
    }
    ExtraParts x;
    int got = extra_build(s, &x);
    CHECK(got >= 0);
    if (got == 1) {
        CHECK(x.row_off[s->rows] == (int32_t)x.entries);
        extra_free(&x);
    }
}

/* scan data in pieces of at most max_cells cells; record rows and bad lines */
static void scan_pieces(const uint8_t *data, size_t size, ptrdiff_t room, int64_t max_cells, int nknown, Seen *seen) {
    size_t at = 0;
    int64_t line = 1;
    int first = 1;
    while (at < size || first) {
        first = 0;
        Scan s;
        CHECK(scan_init(&s, room, max_cells, line) == 0);
        for (int i = 0; i < nknown; i++) CHECK(scan_add_known(&s, (const uint8_t *)KNOWN[i], strlen(KNOWN[i])) == 0);
        CHECK(scan_run(&s, data + at, size - at) == 0);
        CHECK(s.consumed > 0 || size == at);
        if (max_cells && s.rows > 1) CHECK((s.rows - 1) * scan_columns(&s) <= max_cells + scan_columns(&s));
        for (int64_t r = 0; r < s.rows; r++) seen_add(&seen->lines, &seen->rows, &seen->cap, s.lines[r]);
        for (size_t i = 0; i < s.nbad; i += 4) {
            seen_add(&seen->bad, &seen->nbad, &seen->bad_cap, s.bad[i]);
            seen_add(&seen->bad, &seen->nbad, &seen->bad_cap, s.bad[i + 1]);
        }
        check_columns(&s);
        at += s.consumed;
        line = s.next_line;
        scan_free(&s);
    }
}

static void check_framer(const uint8_t *data, size_t size, size_t block, size_t max_record) {
    Frame *f = malloc(sizeof(Frame));
    CHECK(f != NULL);
    frame_init(f, max_record, 1);
    int64_t last = 1, lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    size_t at = 0;
    for (;;) {
        size_t n = size - at < block ? size - at : block;
        if (n)
            frame_feed(f, data + at, n);
        else
            frame_finish(f);
        at += n;
        CHECK(!f->nomem);
        for (size_t i = 0; i < f->nstarts; i++) {
            CHECK(f->starts[i] >= last && f->starts[i] <= lines);
            last = f->starts[i];
        }
        size_t records = 0;
        for (size_t i = 0; i < f->done; i++) records += f->out.p[i] == '\n';
        CHECK(records == f->nstarts);
        Scan s;
        CHECK(scan_init(&s, 8, 0, 1) == 0);
        CHECK(scan_run(&s, f->out.p ? f->out.p : (const uint8_t *)"", f->done) == 0);
        CHECK((size_t)s.rows + s.nbad / 4 <= f->nstarts);
        scan_free(&s);
        frame_take(f);
        if (!n) break;
    }
    frame_free(f);
    free(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    init_tables();
    scan_seed(0x0123456789abcdefULL, 0xfedcba9876543210ULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *input, size_t n) {
    if (n < 3) return 0;
    ptrdiff_t room = input[0] % 8;
    int64_t budgets[] = {0, 1, 2, 3, 5, 8, 64};
    int64_t max_cells = budgets[input[1] % 7];
    int nknown = input[2] % 6;
    const uint8_t *data = input + 3;
    size_t size = n - 3;

    Seen whole = {0}, pieces = {0};
    scan_pieces(data, size, room, 0, nknown, &whole);
    scan_pieces(data, size, room, max_cells, nknown, &pieces);
    CHECK(whole.rows == pieces.rows && whole.nbad == pieces.nbad);
    CHECK(!whole.rows || memcmp(whole.lines, pieces.lines, whole.rows * sizeof(int64_t)) == 0);
    CHECK(!whole.nbad || memcmp(whole.bad, pieces.bad, whole.nbad * sizeof(int64_t)) == 0);
    free(whole.lines);
    free(whole.bad);
    free(pieces.lines);
    free(pieces.bad);

    check_framer(data, size, 1 + input[1] % 16, 1 + input[0] % 64);
    (void)frame_sniff(data, size);
    return 0;
}
