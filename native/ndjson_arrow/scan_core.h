/*
 * The scanner's core: NDJSON text -> per-key column buffers, in one pass, with no Python in it
 * (ndjson_arrow/_scan.c wraps it for Python; native/fuzz/ drives it under libFuzzer).
 *
 * Every line is validated against RFC 8259 and strict UTF-8 while its values are copied straight
 * into per-key column buffers: strings unescaped, numbers and literals as written, nested values
 * as compact text (white space outside strings dropped, the rest as written), JSON null as NULL.
 * A line that is not exactly one object is rolled back and reported with a reason code; nothing
 * else about it survives (not its values, not the keys it introduced).
 *
 * Keys past the column room go to one sparse "extra" list of (row, key, value) entries instead of
 * a column each, so a key explosion costs what the rows hold, not rows x keys.
 *
 * Bounds, whatever the input (see ndjson_arrow/__init__.py):
 * - time: keys are found through SipHash-1-3 under a key drawn at random per process, so no input
 *   can steer them into one probe chain (a name the predicted key is not is first looked up in
 *   one slot of a small table by an unkeyed index of its bytes, and taken from it only when its
 *   bytes match: a name steered there costs one more compare of its bytes, then is hashed as
 *   without it); a line has at most MAX_LINE_KEYS distinct keys (past it the line is bad,
 *   R_TOO_MANY_KEYS) and a scan at most MAX_SCAN_KEYS keys besides the known ones.
 * - memory: a scan stops before the line that would take its columns past ``max_cells`` (rows x
 *   columns, each cell an offset); the caller scans the rest of the text in further calls.
 */
#ifndef NDJSON_SCAN_CORE_H
#define NDJSON_SCAN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 10000
#define MAX_LINE_KEYS 16384
#define MAX_SCAN_KEYS 65536

/* reason codes, mirrored in ndjson_arrow/__init__.py */
enum {
    R_NOT_UTF8 = 1,
    R_TRAILING = 2,
    R_ARRAY = 3,
    R_SCALAR = 4,
    R_MALFORMED = 5,
    R_TOO_DEEP = 6,
    R_TOO_MANY_KEYS = 7,
    R_SURROGATE = 8
};
/* how a value failed; F_FULL: the line would take the scan past its cell budget (it is left for the next) */
/* F_SURROGATE: a \u escape of a lone UTF-16 surrogate (RFC 8259 section 8.2: its grammar allows it,
 * but it names no Unicode character, so no UTF-8 text holds it) */
enum { F_SYNTAX = 1, F_DEPTH = 2, F_NOMEM = 3, F_KEYS = 4, F_FULL = 5, F_SURROGATE = 6 };

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t need) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int emit(Buf *b, const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    if (b->len + n > b->cap && buf_grow(b, b->len + n)) return -1;
    char *d = b->p + b->len;
    if (n <= 16) { /* most values: two overlapping loads and stores, no call (nothing past s + n is read) */
        if (n >= 8) {
            uint64_t a0, a1;
            memcpy(&a0, s, 8);
            memcpy(&a1, s + n - 8, 8);
            memcpy(d, &a0, 8);
            memcpy(d + n - 8, &a1, 8);
        } else if (n >= 4) {
            uint32_t a0, a1;
            memcpy(&a0, s, 4);
            memcpy(&a1, s + n - 4, 4);
            memcpy(d, &a0, 4);
            memcpy(d + n - 4, &a1, 4);
        } else {
            for (size_t i = 0; i < n; i++) d[i] = (char)s[i];
        }
    } else {
        memcpy(d, s, n);
    }
    b->len += n;
    return 0;
}

static inline int emit_byte(Buf *b, uint8_t c) {
    if (b->len + 1 > b->cap && buf_grow(b, b->len + 1)) return -1;
    b->p[b->len++] = (char)c;
    return 0;
}

/* A value that is set: its row, and where its bytes end in the column's data. */
typedef struct {
    int32_t row, end;
} Cell;

/* A top-level key: a column of its own (dense) or a key whose values go to the extra list. */
typedef struct {
    char *name;
    size_t name_len;
    uint64_t hash;
    int spilled;
    ptrdiff_t next; /* the key that followed this one last time: checked before hashing */
    int64_t mark;   /* the line that last used it (Scan.serial): distinct keys per line */
    /* a column: its values back to back in data, and a cell per value that is set, in row order;
     * the Arrow offsets and validity are built from the cells at the end (a column's cells fill
     * in order, so a key set in few rows costs what it holds, not a write per row) */
    Cell *cells;
    int64_t ncells, cells_cap;
    Buf data;
    /* spilled: the entry of the current row, for a repeated key */
    int64_t last_row;
    ptrdiff_t last_entry;
} Key;

typedef struct {
    int64_t row;
    ptrdiff_t key;
    size_t start;
    ptrdiff_t len; /* -1: removed (a later null of the same key in the row) */
} Entry;

/* A slot of the key table: a key's hash beside its index, so a probe that does not match is told
 * from the slot alone, without reading the key. */
typedef struct {
    uint64_t hash;
    ptrdiff_t key; /* -1: empty */
} Slot;

#define RECENT_BITS 12
#define RECENT_SLOTS (1 << RECENT_BITS)

typedef struct {
    Key *keys;
    ptrdiff_t nkeys, keys_cap;
    ptrdiff_t known;           /* keys[0..known) were given */
    ptrdiff_t room, admitted;  /* new keys that may still become columns, and how many did */
    Slot *table;               /* open addressing, key -1 empty */
    size_t table_mask;
    uint64_t probes;           /* slots visited by lookups (what an input could try to inflate) */
    ptrdiff_t first;           /* predicted first key of a row */
    /* A hint per quick index of a name (recent_slot): 1 + the key last found or added through
     * it (0: none), tried when the predicted key is not it and before hashing, so keys seen in no
     * set order (a few of hundreds a row) are found without SipHash, whose rounds were ~15 % of
     * such a scan's instructions. It may be stale: a failed line's rollback frees the keys it
     * added (an index past nkeys, or later one of another name), so a hint is taken only below
     * nkeys and when its name's bytes match. */
    int32_t recent[RECENT_SLOTS];
    Entry *entries;
    ptrdiff_t nentries, entries_cap;
    Buf extra;                 /* bytes of spilled values */
    ptrdiff_t *touched;        /* keys the current line used, once each (to roll it back) */
    ptrdiff_t ntouched, touched_cap;
    int64_t serial;            /* the current line attempt, for Key.mark */
    ptrdiff_t line_keys;       /* distinct keys of the current line */
    Buf scratch;               /* a key with escapes, decoded */
    uint8_t *stack;            /* container kinds of a nested value */
    int64_t rows;
    size_t max_rows;           /* lines in the scanned region: no column or line list grows past it */
    int64_t max_cells;         /* rows x columns this scan may hold (0: no bound) */
    int64_t first_line;        /* the number of the text's first line */
    int64_t *lines;            /* line number of each row */
    const uint8_t *limit;      /* the end of the text given to scan_run: bytes up to it may be read */
    int64_t *bad;              /* (line, reason, start, end) */
    size_t nbad, bad_cap;
    size_t consumed;           /* bytes scanned: whole lines from the start of the text */
    int64_t next_line;         /* the number of the first line not scanned */
    int nomem;
} Scan;

static uint8_t PLAIN[256]; /* a byte copied as is inside a string: printable ASCII but " and \ */
static uint8_t WHITE[256];
static int8_t HEX[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) {
        PLAIN[c] = c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
        WHITE[c] = c == ' ' || c == '\t' || c == '\r' || c == '\n';
        HEX[c] = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    }
}

static inline const uint8_t *skip_white(const uint8_t *p, const uint8_t *end) {
    while (p < end && WHITE[*p]) p++;
    return p;
}

/* A number's digits eight bytes at a time (SWAR: plain 64-bit arithmetic, any CPU): a digit run
 * ends after a length the input chooses, and a byte loop's branch guesses that end wrong about
 * once a number. The mask has the high bit of every byte that is not a digit; the lowest one is
 * exact (a borrow or a carry only ever flags bytes above a true one), so the run ends at the first
 * flagged byte. Words are read up to ``limit``, the end of the scanned buffer, which may lie past
 * ``end``, the end of the line: a run found to go on past the line ends there, and a line's last
 * value is most often within eight bytes of its end. (Strings' runs stay a byte loop: most are a
 * few bytes, where a word costs more than the branch it saves; measured in docs/performance.md.) */
#define SWAR_ONES 0x0101010101010101ULL
#define SWAR_HIGH 0x8080808080808080ULL

/* Eight bytes, the first in the lowest byte of the word (where a borrow starts). */
static inline uint64_t load_word(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* Flags the bytes of x that are not an ASCII digit. */
static inline uint64_t swar_not_digit(uint64_t x) {
    /* a byte b is a digit when b - '0' and b + (0x80 - ':') both leave the high bit clear: the
     * first for b >= '0', the second for b <= '9' (bytes of 0x80 and above are flagged by x) */
    return ((x - SWAR_ONES * '0') | (x + SWAR_ONES * (0x80 - ':')) | x) & SWAR_HIGH;
}

/* The index of the lowest flagged byte of a non-zero mask of a load_word. */
static inline int swar_first(uint64_t mask) { return __builtin_ctzll(mask) >> 3; }

/* The first byte at or after p that is not an ASCII digit, or end (p <= end <= limit). */
static inline const uint8_t *skip_digits(const uint8_t *p, const uint8_t *end, const uint8_t *limit) {
    while (p < end && limit - p >= 8) {
        uint64_t m = swar_not_digit(load_word(p));
        if (m) {
            p += swar_first(m);
            return p < end ? p : end;
        }
        p += 8;
    }
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p < end ? p : end;
}

/* Length of the valid UTF-8 sequence at p (strict: no overlongs, surrogates or > U+10FFFF), or 0. */
static inline int utf8_len(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;
        if (c == 0xED && p[1] > 0x9F) return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] > 0x8F) return 0;
        return 4;
    }
    return 0;
}

static int utf8_valid(const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        int n = utf8_len(p, end);
        if (!n) return 0;
        p += n;
    }
    return 1;
}

static inline int hex4(const uint8_t *p, uint32_t *out) {
    int a = HEX[p[0]], b = HEX[p[1]], c = HEX[p[2]], d = HEX[p[3]];
    if ((a | b | c | d) < 0) return 0;
    *out = (uint32_t)((a << 12) | (b << 8) | (c << 4) | d);
    return 1;
}

static inline size_t put_utf8(uint8_t *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/*
 * A string's body (p just after its opening quote), validated. With ``decode`` its text goes to
 * ``out`` unescaped; without, as written (escapes kept) and with its closing quote. ``out`` may be
 * NULL (validate only). Returns the byte after the closing quote, or NULL (*fail set).
 */
static const uint8_t *string_body(const uint8_t *p, const uint8_t *end, Buf *out, int decode, int *fail) {
    const uint8_t *run = p;
    for (;;) {
        while (p < end && PLAIN[*p]) p++;
        if (p >= end) break;
        uint8_t c = *p;
        if (c >= 0x80) {
            int n = utf8_len(p, end);
            if (!n) break;
            p += n;
            continue;
        }
        if (c == '"') {
            if (out && emit(out, run, (size_t)(p + (decode ? 0 : 1) - run))) {
                *fail = F_NOMEM;
                return NULL;
            }
            return p + 1;
        }
        if (c != '\\' || end - p < 2) break; /* a control character, or a lone backslash at the end */
        uint8_t e = p[1];
        uint8_t one = 0;
        uint32_t cp = 0;
        size_t len = 2;
        switch (e) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u':
            if (end - p < 6 || !hex4(p + 2, &cp)) goto bad;
            len = 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate must pair with a low one */
                uint32_t lo;
                if (end - p < 8 || p[6] != '\\' || p[7] != 'u') goto lone;
                if (end - p < 12 || !hex4(p + 8, &lo)) goto bad;
                if (lo < 0xDC00 || lo > 0xDFFF) goto lone;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                len = 12;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                goto lone;
            }
            break;
        default:
            goto bad;
        }
        if (decode && out) {
            uint8_t u[4];
            size_t n = e == 'u' ? put_utf8(u, cp) : (u[0] = one, 1);
            if (emit(out, run, (size_t)(p - run)) || emit(out, u, n)) {
                *fail = F_NOMEM;
                return NULL;
            }
            run = p + len;
        }
        p += len;
    }
bad:
    *fail = F_SYNTAX;
    return NULL;
lone:
    *fail = F_SURROGATE;
    return NULL;
}

static const uint8_t *number(const uint8_t *p, const uint8_t *end, const uint8_t *limit) {
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        p = skip_digits(p + 1, end, limit);
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        p = skip_digits(p + 1, end, limit);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    return p;
}

/* A number or literal at p (validated): its end, or NULL. ``*is_null`` says it was null. */
static const uint8_t *atom(const uint8_t *p, const uint8_t *end, const uint8_t *limit, int *is_null) {
    *is_null = 0;
    size_t left = (size_t)(end - p);
    switch (*p) {
    case 't':
        return left >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return left >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        *is_null = 1;
        return left >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return number(p, end, limit);
    }
}

/*
 * One JSON value at p (any kind), validated; nested values written compact to ``out`` (NULL:
 * validate only), depth counted from ``depth`` (the level p is at). Strings are written as
 * written, with their quotes. Returns the end, or NULL (*fail set).
 */
static const uint8_t *value(Scan *s, const uint8_t *p, const uint8_t *end, Buf *out, int depth, int *fail) {
    uint8_t *stack = s->stack;
    int top = 0; /* containers open inside this value */
    int is_null;
    const uint8_t *q;
    for (;;) {
        /* a value starts at p */
        if (p >= end) goto syntax;
        if (*p == '{' || *p == '[') {
            if (depth + top >= MAX_DEPTH) {
                *fail = F_DEPTH;
                return NULL;
            }
            uint8_t open = *p;
            stack[top++] = open;
            if (out && emit_byte(out, open)) goto nomem;
            p = skip_white(p + 1, end);
            if (p >= end) goto syntax;
            if (*p == (open == '{' ? '}' : ']')) {
                if (out && emit_byte(out, *p)) goto nomem;
                p++;
                top--;
                goto after;
            }
            if (open == '{') goto member;
            continue;
        }
        if (*p == '"') {
            if (out && emit_byte(out, '"')) goto nomem; /* the closing quote comes with the body */
            p = string_body(p + 1, end, out, 0, fail);
            if (!p) return NULL;
        } else {
            q = atom(p, end, s->limit, &is_null);
            if (!q) goto syntax;
            if (out && emit(out, p, (size_t)(q - p))) goto nomem;
            p = q;
        }
    after:
        if (top == 0) return p;
        p = skip_white(p, end);
        if (p >= end) goto syntax;
        if (*p == ',') {
            if (out && emit_byte(out, ',')) goto nomem;
            p = skip_white(p + 1, end);
            if (stack[top - 1] == '{') goto member;
            continue;
        }
        if (*p == (stack[top - 1] == '{' ? '}' : ']')) {
            if (out && emit_byte(out, *p)) goto nomem;
            p++;
            top--;
            goto after;
        }
        goto syntax;
    member:
        /* a member of an object starts at p: "key" : value */
        if (p >= end || *p != '"') goto syntax;
        if (out && emit_byte(out, '"')) goto nomem;
        p = string_body(p + 1, end, out, 0, fail);
        if (!p) return NULL;
        p = skip_white(p, end);
        if (p >= end || *p != ':') goto syntax;
        if (out && emit_byte(out, ':')) goto nomem;
        p = skip_white(p + 1, end);
    }
syntax:
    *fail = F_SYNTAX;
    return NULL;
nomem:
    *fail = F_NOMEM;
    return NULL;
}

/* -- keys ---------------------------------------------------------------------------------- */
/* SipHash-1-3 (Aumasson and Bernstein; the variant CPython hashes str and bytes with) under a
 * 128-bit key the process draws at random (scan_seed): which keys share a probe chain cannot be
 * known, so cannot be chosen, by whoever writes the input. */
static uint64_t SIP_K0, SIP_K1;

static void scan_seed(uint64_t k0, uint64_t k1) {
    SIP_K0 = k0;
    SIP_K1 = k1;
}

static inline uint64_t rotl64(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

static inline uint64_t load64le(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* one load (a byte loop was eight) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* a == b over n bytes; names of 4 to 16 bytes (most keys) in two overlapping loads each, no call */
static inline int same_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n >= 8 && n <= 16) {
        uint64_t a0, b0, a1, b1;
        memcpy(&a0, a, 8);
        memcpy(&b0, b, 8);
        memcpy(&a1, a + n - 8, 8);
        memcpy(&b1, b + n - 8, 8);
        return ((a0 ^ b0) | (a1 ^ b1)) == 0;
    }
    if (n >= 4 && n < 8) {
        uint32_t a0, b0, a1, b1;
        memcpy(&a0, a, 4);
        memcpy(&b0, b, 4);
        memcpy(&a1, a + n - 4, 4);
        memcpy(&b1, b + n - 4, 4);
        return ((a0 ^ b0) | (a1 ^ b1)) == 0;
    }
    if (n < 4) { /* a name of one to three bytes ("id", "ts"): no call either */
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i]) return 0;
        return 1;
    }
    return memcmp(a, b, n) == 0;
}

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1; v1 = rotl64(v1, 13); v1 ^= v0; v0 = rotl64(v0, 32);                              \
        v2 += v3; v3 = rotl64(v3, 16); v3 ^= v2;                                                   \
        v0 += v3; v3 = rotl64(v3, 21); v3 ^= v0;                                                   \
        v2 += v1; v1 = rotl64(v1, 17); v1 ^= v2; v2 = rotl64(v2, 32);                              \
    } while (0)

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ SIP_K0, v1 = 0x646f72616e646f6dULL ^ SIP_K1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ SIP_K0, v3 = 0x7465646279746573ULL ^ SIP_K1;
    const uint8_t *end = p + (n & ~(size_t)7);
    for (; p < end; p += 8) {
        uint64_t m = load64le(p);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (int i = (int)(n & 7) - 1; i >= 0; i--) b |= (uint64_t)p[i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static int table_build(Scan *s, size_t slots) {
    Slot *t = malloc(slots * sizeof(Slot));
    if (!t) return -1;
    for (size_t i = 0; i < slots; i++) t[i] = (Slot){0, -1};
    free(s->table);
    s->table = t;
    s->table_mask = slots - 1;
    for (ptrdiff_t k = 0; k < s->nkeys; k++) {
        size_t i = (size_t)s->keys[k].hash & s->table_mask;
        while (t[i].key >= 0) i = (i + 1) & s->table_mask;
        t[i] = (Slot){s->keys[k].hash, k};
    }
    return 0;
}

/* Whether ``key`` is named by name..name+n. */
static inline int key_is(const Key *key, const uint8_t *name, size_t n) {
    return key->name_len == n && same_bytes((const uint8_t *)key->name, name, n);
}

static ptrdiff_t key_find(Scan *s, const uint8_t *name, size_t n, uint64_t h) {
    size_t i = (size_t)h & s->table_mask;
    uint64_t probes = 0;
    ptrdiff_t k;
    for (;; i = (i + 1) & s->table_mask) {
        probes++;
        const Slot *slot = &s->table[i];
        k = slot->key;
        if (k < 0) break;
        if (slot->hash != h) continue;
        if (key_is(&s->keys[k], name, n)) break;
    }
    s->probes += probes;
    return k;
}

static ptrdiff_t key_add(Scan *s, const uint8_t *name, size_t n, uint64_t h, int spilled) {
    if (s->nkeys == s->keys_cap) {
        ptrdiff_t cap = s->keys_cap ? s->keys_cap * 2 : 64;
        Key *keys = realloc(s->keys, (size_t)cap * sizeof(Key));
        if (!keys) return -1;
        s->keys = keys;
        s->keys_cap = cap;
    }
    Key *key = &s->keys[s->nkeys];
    memset(key, 0, sizeof(Key));
    key->name = malloc(n ? n : 1);
    if (!key->name) return -1;
    if (n) memcpy(key->name, name, n);
    key->name_len = n;
    key->hash = h;
    key->spilled = spilled;
    key->next = -1;
    key->mark = -1;
    key->last_row = -1;
    s->nkeys++;
    if ((size_t)s->nkeys * 2 > s->table_mask + 1) {
        if (table_build(s, (s->table_mask + 1) * 2)) return -1;
    } else {
        size_t i = (size_t)h & s->table_mask;
        while (s->table[i].key >= 0) {
            s->probes++;
            i = (i + 1) & s->table_mask;
        }
        s->table[i] = (Slot){h, s->nkeys - 1};
    }
    return s->nkeys - 1;
}

static void key_free(Key *key) {
    free(key->name);
    free(key->cells);
    free(key->data.p);
}

/* A known key (given before the scan): 0, -1 out of memory, -2 given twice. */
static int scan_add_known(Scan *s, const uint8_t *name, size_t n) {
    uint64_t h = hash_bytes(name, n);
    if (key_find(s, name, n, h) >= 0) return -2;
    if (key_add(s, name, n, h, 0) < 0) return -1;
    s->known = s->nkeys;
    return 0;
}

/* Columns the scan holds: the known keys and the new ones admitted as columns. */
static inline int64_t scan_columns(const Scan *s) { return (int64_t)s->known + (int64_t)s->admitted; }

/* A slot of Scan.recent for a name: from its length and its first and last bytes, unkeyed (a
 * name steered to a taken slot only misses it and is hashed, as every name was before). */
/* tests/native/test_scan_fuzz.py builds names that share a slot under this mix: change both. */
static inline size_t recent_slot(const uint8_t *name, size_t n) {
    uint64_t x;
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, name, 8);
        memcpy(&b, name + n - 8, 8);
        x = a ^ rotl64(b, 31);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, name, 4);
        memcpy(&b, name + n - 4, 4);
        x = a | (uint64_t)b << 32;
    } else {
        x = 0;
        for (size_t i = 0; i < n; i++) x = x << 8 | name[i];
    }
    return (size_t)(((x ^ n) * 0x9E3779B97F4A7C15ULL) >> (64 - RECENT_BITS));
}

/* The key named by p..p+n, found or added (as a column while there is room): its index, or
 * -1 out of memory, or -F_FULL when a new column would take the scan past its cell budget. */
static ptrdiff_t key_of(Scan *s, ptrdiff_t prev, const uint8_t *name, size_t n) {
    ptrdiff_t guess = prev >= 0 ? s->keys[prev].next : s->first;
    ptrdiff_t k = -1;
    if (guess >= 0 && guess < s->nkeys && key_is(&s->keys[guess], name, n)) k = guess;
    size_t slot = 0;
    if (k < 0) {
        slot = recent_slot(name, n);
        ptrdiff_t r = (ptrdiff_t)s->recent[slot] - 1;
        s->probes++; /* a slot visited too; a miss then costs one compare of the name */
        /* below nkeys: a rolled-back key's name is freed */
        if (r >= 0 && r < s->nkeys && key_is(&s->keys[r], name, n)) k = r;
    }
    if (k < 0) {
        uint64_t h = hash_bytes(name, n);
        k = key_find(s, name, n, h);
        if (k < 0) {
            int spill = s->admitted >= s->room;
            /* a column costs an offset for every row of the scan, this one included */
            if (!spill && s->max_cells && s->rows > 0 && (s->rows + 1) * (scan_columns(s) + 1) > s->max_cells)
                return -F_FULL;
            k = key_add(s, name, n, h, spill);
            if (k < 0) return -1;
            if (!spill) s->admitted++;
        }
        s->recent[slot] = (int32_t)(k + 1);
    }
    if (prev >= 0)
        s->keys[prev].next = k;
    else
        s->first = k;
    return k;
}

/* -- columns -------------------------------------------------------------------------------- */
/* Drop a column's value of row r, if it has one (a repeated key: the last one wins; a failed
 * line), with any bytes written after its last value. */
static inline void column_drop(Key *key, int64_t r) {
    if (key->ncells && key->cells[key->ncells - 1].row == r) key->ncells--;
    key->data.len = key->ncells ? (size_t)key->cells[key->ncells - 1].end : 0;
}

/* Make row r of a column the next to write: room for its cell, and no earlier value of it. */
static int column_at(Scan *s, Key *key, int64_t r) {
    if (key->ncells == key->cells_cap) {
        int64_t cap = key->cells_cap ? key->cells_cap * 2 : 64;
        if (cap > (int64_t)s->max_rows) cap = (int64_t)s->max_rows;
        Cell *cells = realloc(key->cells, (size_t)(cap ? cap : 1) * sizeof(Cell));
        if (!cells) return -1;
        key->cells = cells;
        key->cells_cap = cap;
    }
    column_drop(key, r);
    return 0;
}

static inline void column_done(Key *key, int64_t r, int is_null) {
    if (!is_null) key->cells[key->ncells++] = (Cell){(int32_t)r, (int32_t)key->data.len};
}

/* Note that the current line uses key k: F_KEYS past MAX_LINE_KEYS distinct keys, F_NOMEM. */
static int touch(Scan *s, ptrdiff_t k) {
    Key *key = &s->keys[k];
    if (key->mark == s->serial) return 0;
    key->mark = s->serial;
    if (++s->line_keys > MAX_LINE_KEYS) return F_KEYS;
    if (s->ntouched == s->touched_cap) {
        ptrdiff_t cap = s->touched_cap ? s->touched_cap * 2 : 64;
        ptrdiff_t *t = realloc(s->touched, (size_t)cap * sizeof(ptrdiff_t));
        if (!t) return F_NOMEM;
        s->touched = t;
        s->touched_cap = cap;
    }
    s->touched[s->ntouched++] = k;
    return 0;
}

/* Undo what a line wrote before it failed: its values, its extra entries, the keys it added. */
static void rollback(Scan *s, int64_t r, ptrdiff_t nkeys, ptrdiff_t nentries, size_t extra_len, ptrdiff_t admitted) {
    for (ptrdiff_t i = 0; i < s->ntouched; i++) {
        ptrdiff_t k = s->touched[i];
        if (k >= nkeys) continue;
        Key *key = &s->keys[k];
        if (key->spilled) {
            key->last_row = -1;
        } else {
            column_drop(key, r); /* row r's value, whole or cut off by the failure */
        }
    }
    s->nentries = nentries;
    s->extra.len = extra_len;
    /* The line's keys are the newest in the table, after every other key of their probe chains
     * (a rebuild inserts keys in index order too): emptying their slots, newest first, undoes
     * their insertion exactly. */
    for (ptrdiff_t k = s->nkeys - 1; k >= nkeys; k--) {
        size_t i = (size_t)s->keys[k].hash & s->table_mask;
        while (s->table[i].key != k) i = (i + 1) & s->table_mask;
        s->table[i].key = -1;
        key_free(&s->keys[k]);
    }
    s->nkeys = nkeys;
    s->admitted = admitted;
    if (s->first >= nkeys) s->first = -1;
}

/* One value of a top-level key at p, into its column or the extra list. */
static const uint8_t *member_value(Scan *s, ptrdiff_t k, const uint8_t *p, const uint8_t *end, int *fail) {
    Key *key = &s->keys[k];
    int64_t r = s->rows;
    Buf *out;
    if (key->spilled) {
        out = &s->extra;
    } else {
        if (column_at(s, key, r)) goto nomem;
        out = &key->data;
    }
    size_t start = out->len;
    int is_null = 0;
    const uint8_t *q;
    if (*p == '"') {
        q = string_body(p + 1, end, out, 1, fail);
    } else if (*p == '{' || *p == '[') {
        q = value(s, p, end, out, 1, fail);
    } else {
        q = atom(p, end, s->limit, &is_null);
        if (!q) {
            *fail = F_SYNTAX;
        } else if (!is_null && emit(out, p, (size_t)(q - p))) {
            goto nomem;
        }
    }
    if (!q) return NULL;
    if (!key->spilled) {
        column_done(key, r, is_null);
        return q;
    }
    /* spilled: the entry of this row for this key (a repeated key replaces it); null is not kept */
    ptrdiff_t len = is_null ? -1 : (ptrdiff_t)(out->len - start);
    if (key->last_row == r) {
        s->entries[key->last_entry].start = start;
        s->entries[key->last_entry].len = len;
        return q;
    }
    if (is_null) return q;
    if (s->nentries == s->entries_cap) {
        ptrdiff_t cap = s->entries_cap ? s->entries_cap * 2 : 256;
        Entry *e = realloc(s->entries, (size_t)cap * sizeof(Entry));
        if (!e) goto nomem;
        s->entries = e;
        s->entries_cap = cap;
    }
    s->entries[s->nentries] = (Entry){r, k, start, len};
    key->last_row = r;
    key->last_entry = s->nentries++;
    return q;
nomem:
    *fail = F_NOMEM;
    return NULL;
}

/* A line (no newline in it) that is an object: its values into the columns. 0, -1 (an object
 * then more), or how it failed (F_*). */
static int object_line(Scan *s, const uint8_t *p, const uint8_t *end) {
    int fail = 0;
    ptrdiff_t prev = -1;
    p = skip_white(p + 1, end); /* after { */
    if (p < end && *p == '}') goto closed;
    for (;;) {
        if (p >= end || *p != '"') return F_SYNTAX;
        /* the key: as written when it has no escapes, else decoded into scratch */
        const uint8_t *k0 = p + 1, *k1 = k0;
        while (k1 < end && PLAIN[*k1]) k1++;
        const uint8_t *name = k0;
        size_t n;
        if (k1 < end && *k1 == '"') {
            n = (size_t)(k1 - k0);
            p = k1 + 1;
        } else {
            s->scratch.len = 0;
            p = string_body(k0, end, &s->scratch, 1, &fail);
            if (!p) return fail;
            name = (const uint8_t *)s->scratch.p;
            n = s->scratch.len;
        }
        p = skip_white(p, end);
        if (p >= end || *p != ':') return F_SYNTAX;
        p = skip_white(p + 1, end);
        if (p >= end) return F_SYNTAX;
        ptrdiff_t k = key_of(s, prev, name, n);
        if (k == -F_FULL) return F_FULL;
        if (k < 0) return F_NOMEM;
        int got = touch(s, k);
        if (got) return got;
        prev = k;
        p = member_value(s, k, p, end, &fail);
        if (!p) return fail;
        p = skip_white(p, end);
        if (p < end && *p == ',') {
            p = skip_white(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') break;
        return F_SYNTAX;
    }
closed:
    p = skip_white(p + 1, end);
    return p < end ? -1 : 0;
}

static int add_bad(Scan *s, int64_t line, int reason, size_t start, size_t stop) {
    if (s->nbad + 4 > s->bad_cap) {
        size_t cap = s->bad_cap ? s->bad_cap * 2 : 64;
        int64_t *b = realloc(s->bad, cap * sizeof(int64_t));
        if (!b) return -1;
        s->bad = b;
        s->bad_cap = cap;
    }
    s->bad[s->nbad++] = line;
    s->bad[s->nbad++] = reason;
    s->bad[s->nbad++] = (int64_t)start;
    s->bad[s->nbad++] = (int64_t)stop;
    return 0;
}

/* The reason code of a line whose value failed with ``fail`` (F_*). */
static int reason_of(int fail) {
    return fail == F_DEPTH       ? R_TOO_DEEP
           : fail == F_KEYS      ? R_TOO_MANY_KEYS
           : fail == F_SURROGATE ? R_SURROGATE
                                 : R_MALFORMED;
}

/* Why a line that is not an object (p at its first token) is bad. */
static int not_object(Scan *s, const uint8_t *p, const uint8_t *end) {
    int fail = 0;
    const uint8_t *q = value(s, p, end, NULL, 0, &fail);
    if (!q) return reason_of(fail);
    if (skip_white(q, end) < end) return R_TRAILING;
    return *p == '[' ? R_ARRAY : R_SCALAR;
}

/* The end of the region a scan of data[0..size) may read: past at most ``cap`` line feeds (a
 * bound on the rows it can hold); ``*lines`` the lines that start in it. */
static size_t scan_region(const uint8_t *data, size_t size, size_t cap, size_t *lines) {
    const uint8_t *p = data, *stop = data + size;
    size_t n = 0;
    while (n < cap && (p = memchr(p, '\n', (size_t)(stop - p))) != NULL) {
        n++;
        p++;
    }
    if (n < cap || !p) {
        *lines = n + 1;
        return size;
    }
    *lines = n;
    return (size_t)(p - data);
}

/* Prepare a scan of data[0..size): the lines array for the rows it may hold. 0, or -1. */
static int scan_start(Scan *s, const uint8_t *data, size_t size, size_t *region) {
    size_t cap = SIZE_MAX;
    if (s->max_cells > 0) { /* rows x the known columns never exceed the budget: no more lines than that */
        int64_t cols = s->known > 0 ? (int64_t)s->known : 1;
        cap = (size_t)(s->max_cells / cols) + 1;
    }
    *region = scan_region(data, size, cap, &s->max_rows);
    s->lines = malloc((s->max_rows ? s->max_rows : 1) * sizeof(int64_t));
    return s->lines ? 0 : -1;
}

static void scan_lines(Scan *s, const uint8_t *data, size_t size) {
    const uint8_t *base = data, *stop = data + size;
    int64_t number = s->first_line - 1; /* the last line scanned */
    const uint8_t *line = data;
    while (line < stop) {
        const uint8_t *nl = memchr(line, '\n', (size_t)(stop - line));
        const uint8_t *end = nl ? nl : stop;
        if ((size_t)s->rows >= s->max_rows) break; /* the region's lines are all scanned */
        if (s->rows > 0) { /* stop before a line that might need more than the scan has left */
            if (s->max_cells && (s->rows + 1) * scan_columns(s) > s->max_cells) break;
            if (s->nkeys - s->known > MAX_SCAN_KEYS - MAX_LINE_KEYS) break;
        }
        const uint8_t *p = skip_white(line, end);
        if (p < end) {
            int reason = 0;
            if (*p == '{') {
                ptrdiff_t nkeys = s->nkeys, nentries = s->nentries, admitted = s->admitted;
                size_t extra_len = s->extra.len;
                s->ntouched = 0;
                s->line_keys = 0;
                s->serial++;
                int got = object_line(s, p, end);
                if (got == F_NOMEM || s->nomem) {
                    s->nomem = 1;
                    break;
                }
                if (got == 0) {
                    s->lines[s->rows++] = number + 1;
                } else {
                    rollback(s, s->rows, nkeys, nentries, extra_len, admitted);
                    if (got == F_FULL) break; /* the line is the next scan's first */
                    reason = got == -1 ? R_TRAILING : reason_of(got);
                }
            } else {
                reason = not_object(s, p, end);
            }
            if (reason) {
                if (!utf8_valid(line, end)) reason = R_NOT_UTF8;
                if (add_bad(s, number + 1, reason, (size_t)(line - base), (size_t)(end - base))) {
                    s->nomem = 1;
                    break;
                }
            }
        }
        number++;
        line = nl ? nl + 1 : stop;
    }
    s->consumed = (size_t)(line - base);
    s->next_line = number + 1;
}

/* A column's Arrow offsets (rows + 1) and validity bitmap (NULL when every row is set), built from
 * its cells in one pass in row order. 0, or -1 out of memory. */
static inline void fill32(int32_t *restrict p, int64_t n, int32_t v) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) p[i] = p[i + 1] = p[i + 2] = p[i + 3] = v;
    for (; i < n; i++) p[i] = v;
}

static int column_build(const Scan *s, const Key *key, int32_t **offsets_out, uint8_t **valid_out) {
    int64_t rows = s->rows, n = key->ncells;
    int32_t *offsets = malloc(((size_t)rows + 1) * sizeof(int32_t));
    uint8_t *valid = n == rows ? NULL : calloc(((size_t)rows + 7) >> 3, 1);
    if (!offsets || (n != rows && !valid)) {
        free(offsets);
        free(valid);
        return -1;
    }
    int64_t row = 0;
    int32_t end = 0;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t at = key->cells[i].row;
        fill32(offsets + 1 + row, at - row, end); /* NULL rows: empty */
        end = key->cells[i].end;
        offsets[1 + at] = end;
        row = at + 1;
        if (valid) valid[at >> 3] |= (uint8_t)(1u << (at & 7));
    }
    fill32(offsets + 1 + row, rows - row, end);
    *offsets_out = offsets;
    *valid_out = valid;
    return 0;
}

/* The extra list as a map column's parts (all offsets int32). */
typedef struct {
    int32_t *row_off; /* rows + 1 */
    uint8_t *valid;   /* a row with no entry is NULL */
    int64_t nulls;
    int32_t *key_off, *val_off; /* entries + 1 */
    char *kdata, *vdata;
    size_t kl, vl;
    ptrdiff_t entries;
} ExtraParts;

static void extra_free(ExtraParts *e) {
    free(e->row_off);
    free(e->valid);
    free(e->key_off);
    free(e->val_off);
    free(e->kdata);
    free(e->vdata);
    memset(e, 0, sizeof(*e));
}

/* 1 built, 0 no entry, -1 out of memory, -2 over 2 GiB. */
static int extra_build(const Scan *s, ExtraParts *x) {
    memset(x, 0, sizeof(*x));
    ptrdiff_t live = 0;
    size_t key_bytes = 0, value_bytes = 0;
    for (ptrdiff_t i = 0; i < s->nentries; i++) {
        if (s->entries[i].len < 0) continue;
        live++;
        key_bytes += s->keys[s->entries[i].key].name_len;
        value_bytes += (size_t)s->entries[i].len;
    }
    if (live == 0) return 0;
    if (key_bytes > INT32_MAX || value_bytes > INT32_MAX) return -2;
    int64_t rows = s->rows;
    x->row_off = calloc((size_t)rows + 1, sizeof(int32_t));
    x->valid = calloc(((size_t)rows + 7) >> 3, 1);
    x->key_off = malloc(((size_t)live + 1) * sizeof(int32_t));
    x->val_off = malloc(((size_t)live + 1) * sizeof(int32_t));
    x->kdata = malloc(key_bytes ? key_bytes : 1);
    x->vdata = malloc(value_bytes ? value_bytes : 1);
    if (!x->row_off || !x->valid || !x->key_off || !x->val_off || !x->kdata || !x->vdata) {
        extra_free(x);
        return -1;
    }
    ptrdiff_t j = 0;
    x->key_off[0] = x->val_off[0] = 0;
    for (ptrdiff_t i = 0; i < s->nentries; i++) { /* entries are in row order already */
        const Entry *e = &s->entries[i];
        if (e->len < 0) continue;
        const Key *key = &s->keys[e->key];
        if (key->name_len) memcpy(x->kdata + x->kl, key->name, key->name_len);
        x->kl += key->name_len;
        if (e->len) memcpy(x->vdata + x->vl, s->extra.p + e->start, (size_t)e->len);
        x->vl += (size_t)e->len;
        j++;
        x->key_off[j] = (int32_t)x->kl;
        x->val_off[j] = (int32_t)x->vl;
        x->row_off[e->row + 1]++;
        x->valid[e->row >> 3] |= (uint8_t)(1u << (e->row & 7));
    }
    for (int64_t r = 0; r < rows; r++) {
        x->nulls += x->row_off[r + 1] == 0;
        x->row_off[r + 1] += x->row_off[r];
    }
    x->entries = live;
    return 1;
}

/* A scan ready for scan_add_known and scan_run: 0, or -1 out of memory. */
static int scan_init(Scan *s, ptrdiff_t room, int64_t max_cells, int64_t first_line) {
    memset(s, 0, sizeof(*s));
    s->first = -1;
    s->room = room < 0 ? 0 : room;
    s->max_cells = max_cells < 0 ? 0 : max_cells;
    s->first_line = first_line;
    s->stack = malloc(MAX_DEPTH + 1);
    if (!s->stack || table_build(s, 64)) return -1;
    return 0;
}

/* Scan whole lines of data[0..size) from its start, as far as the bounds allow (at least one line
 * when there is one): s->consumed, s->next_line and the results. 0, or -1 out of memory. */
static int scan_run(Scan *s, const uint8_t *data, size_t size) {
    size_t region;
    s->limit = data + size;
    if (scan_start(s, data, size, &region)) return -1;
    scan_lines(s, data, region);
    return s->nomem ? -1 : 0;
}

static void scan_free(Scan *s) {
    for (ptrdiff_t k = 0; k < s->nkeys; k++) key_free(&s->keys[k]);
    free(s->keys);
    free(s->table);
    free(s->entries);
    free(s->extra.p);
    free(s->touched);
    free(s->scratch.p);
    free(s->stack);
    free(s->lines);
    free(s->bad);
    memset(s, 0, sizeof(*s));
}

#endif
