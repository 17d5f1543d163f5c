/*
 * NDJSON text -> Arrow string columns, one per top-level key, in one pass over the bytes.
 *
 * The job's hot loop (see ndjson_arrow/__init__.py for the contract). Every line is validated
 * against RFC 8259 and strict UTF-8 while its values are copied straight into per-key column
 * buffers: strings unescaped, numbers and literals as written, nested values as compact text
 * (white space outside strings dropped, the rest as written), JSON null as NULL. A line that
 * is not exactly one object is rolled back and reported with a reason code; nothing else about
 * it survives (not its values, not the keys it introduced).
 *
 * Keys past the column room go to one sparse "extra" list of (row, key, value) entries instead of
 * a column each, so a key explosion costs what the rows hold, not rows x keys.
 *
 * No Python object is touched while scanning: the GIL is released for the whole pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 10000

/* reason codes, mirrored in ndjson_arrow/__init__.py */
enum { R_NOT_UTF8 = 1, R_TRAILING = 2, R_ARRAY = 3, R_SCALAR = 4, R_MALFORMED = 5, R_TOO_DEEP = 6 };
/* how a value failed */
enum { F_SYNTAX = 1, F_DEPTH = 2, F_NOMEM = 3 };

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
    memcpy(b->p + b->len, s, n);
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
    Py_ssize_t next; /* the key that followed this one last time: checked before hashing */
    /* a column: its values back to back in data, and a cell per value that is set, in row order;
     * the Arrow offsets and validity are built from the cells at the end (a column's cells fill
     * in order, so a key set in few rows costs what it holds, not a write per row) */
    Cell *cells;
    int64_t ncells, cells_cap;
    Buf data;
    /* spilled: the entry of the current row, for a repeated key */
    int64_t last_row;
    Py_ssize_t last_entry;
} Key;

typedef struct {
    int64_t row;
    Py_ssize_t key;
    size_t start;
    Py_ssize_t len; /* -1: removed (a later null of the same key in the row) */
} Entry;

typedef struct {
    Key *keys;
    Py_ssize_t nkeys, keys_cap;
    Py_ssize_t known; /* keys[0..known) were given */
    Py_ssize_t room, admitted; /* new keys that may still become columns, and how many did */
    Py_ssize_t *table; /* open addressing, -1 empty */
    size_t table_mask;
    Py_ssize_t first; /* predicted first key of a row */
    Entry *entries;
    Py_ssize_t nentries, entries_cap;
    Buf extra; /* bytes of spilled values */
    Py_ssize_t *touched;
    Py_ssize_t ntouched, touched_cap;
    Buf scratch; /* a key with escapes, decoded */
    uint8_t *stack; /* container kinds of a nested value */
    int64_t rows;
    size_t max_rows; /* the chunk's line count: no column or line list ever grows past it */
    int32_t *lines;
    int64_t *bad; /* (line, reason, start, end) */
    size_t nbad, bad_cap;
    int nomem;
    int changed; /* the input buffer was written to during the scan */
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
                if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    goto bad;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                len = 12;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                goto bad;
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
}

static const uint8_t *number(const uint8_t *p, const uint8_t *end) {
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
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
static const uint8_t *atom(const uint8_t *p, const uint8_t *end, int *is_null) {
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
        return number(p, end);
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
            q = atom(p, end, &is_null);
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
static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int table_build(Scan *s, size_t slots) {
    Py_ssize_t *t = malloc(slots * sizeof(Py_ssize_t));
    if (!t) return -1;
    for (size_t i = 0; i < slots; i++) t[i] = -1;
    free(s->table);
    s->table = t;
    s->table_mask = slots - 1;
    for (Py_ssize_t k = 0; k < s->nkeys; k++) {
        size_t i = (size_t)s->keys[k].hash & s->table_mask;
        while (t[i] >= 0) i = (i + 1) & s->table_mask;
        t[i] = k;
    }
    return 0;
}

static Py_ssize_t key_find(Scan *s, const uint8_t *name, size_t n, uint64_t h) {
    size_t i = (size_t)h & s->table_mask;
    for (;;) {
        Py_ssize_t k = s->table[i];
        if (k < 0) return -1;
        Key *key = &s->keys[k];
        if (key->hash == h && key->name_len == n && memcmp(key->name, name, n) == 0) return k;
        i = (i + 1) & s->table_mask;
    }
}

static Py_ssize_t key_add(Scan *s, const uint8_t *name, size_t n, uint64_t h, int spilled) {
    if (s->nkeys == s->keys_cap) {
        Py_ssize_t cap = s->keys_cap ? s->keys_cap * 2 : 64;
        Key *keys = realloc(s->keys, (size_t)cap * sizeof(Key));
        if (!keys) return -1;
        s->keys = keys;
        s->keys_cap = cap;
    }
    Key *key = &s->keys[s->nkeys];
    memset(key, 0, sizeof(Key));
    key->name = malloc(n ? n : 1);
    if (!key->name) return -1;
    memcpy(key->name, name, n);
    key->name_len = n;
    key->hash = h;
    key->spilled = spilled;
    key->next = -1;
    key->last_row = -1;
    s->nkeys++;
    if ((size_t)s->nkeys * 2 > s->table_mask + 1) {
        if (table_build(s, (s->table_mask + 1) * 2)) return -1;
    } else {
        size_t i = (size_t)h & s->table_mask;
        while (s->table[i] >= 0) i = (i + 1) & s->table_mask;
        s->table[i] = s->nkeys - 1;
    }
    return s->nkeys - 1;
}

static void key_free(Key *key) {
    free(key->name);
    free(key->cells);
    free(key->data.p);
}

/* The key named by p..p+n, found or added (as a column while there is room). */
static Py_ssize_t key_of(Scan *s, Py_ssize_t prev, const uint8_t *name, size_t n) {
    Py_ssize_t guess = prev >= 0 ? s->keys[prev].next : s->first;
    if (guess >= 0 && guess < s->nkeys) {
        Key *g = &s->keys[guess];
        if (g->name_len == n && memcmp(g->name, name, n) == 0) return guess;
    }
    uint64_t h = hash_bytes(name, n);
    Py_ssize_t k = key_find(s, name, n, h);
    if (k < 0) {
        int spill = s->admitted >= s->room;
        k = key_add(s, name, n, h, spill);
        if (k < 0) return -1;
        if (!spill) s->admitted++;
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

static int touch(Scan *s, Py_ssize_t k) {
    if (s->ntouched == s->touched_cap) {
        Py_ssize_t cap = s->touched_cap ? s->touched_cap * 2 : 64;
        Py_ssize_t *t = realloc(s->touched, (size_t)cap * sizeof(Py_ssize_t));
        if (!t) return -1;
        s->touched = t;
        s->touched_cap = cap;
    }
    s->touched[s->ntouched++] = k;
    return 0;
}

/* Undo what a line wrote before it failed: its values, its extra entries, the keys it added. */
static void rollback(Scan *s, int64_t r, Py_ssize_t nkeys, Py_ssize_t nentries, size_t extra_len) {
    for (Py_ssize_t i = 0; i < s->ntouched; i++) {
        Py_ssize_t k = s->touched[i];
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
    for (Py_ssize_t k = s->nkeys - 1; k >= nkeys; k--) {
        size_t i = (size_t)s->keys[k].hash & s->table_mask;
        while (s->table[i] != k) i = (i + 1) & s->table_mask;
        s->table[i] = -1;
        if (!s->keys[k].spilled) s->admitted--;
        key_free(&s->keys[k]);
    }
    s->nkeys = nkeys;
}

/* One value of a top-level key at p, into its column or the extra list. */
static const uint8_t *member_value(Scan *s, Py_ssize_t k, const uint8_t *p, const uint8_t *end, int *fail) {
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
        q = atom(p, end, &is_null);
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
    Py_ssize_t len = is_null ? -1 : (Py_ssize_t)(out->len - start);
    if (key->last_row == r) {
        s->entries[key->last_entry].start = start;
        s->entries[key->last_entry].len = len;
        return q;
    }
    if (is_null) return q;
    if (s->nentries == s->entries_cap) {
        Py_ssize_t cap = s->entries_cap ? s->entries_cap * 2 : 256;
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

/* A line (no newline in it) that is an object: its values into the columns. 0, or a reason. */
static int object_line(Scan *s, const uint8_t *p, const uint8_t *end) {
    int fail = 0;
    Py_ssize_t prev = -1;
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
        Py_ssize_t k = key_of(s, prev, name, n);
        if (k < 0 || touch(s, k)) return F_NOMEM;
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
    return p < end ? -1 : 0; /* -1: an object, then more */
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

/* Why a line that is not an object (p at its first token) is bad. */
static int not_object(Scan *s, const uint8_t *p, const uint8_t *end) {
    int fail = 0;
    const uint8_t *q = value(s, p, end, NULL, 0, &fail);
    if (!q) return fail == F_DEPTH ? R_TOO_DEEP : R_MALFORMED;
    if (skip_white(q, end) < end) return R_TRAILING;
    return *p == '[' ? R_ARRAY : R_SCALAR;
}

static void scan_all(Scan *s, const uint8_t *data, size_t size) {
    const uint8_t *base = data, *stop = data + size;
    int64_t number = 0;
    const uint8_t *line = data;
    while (line < stop || (line == stop && number == 0 && size == 0)) {
        const uint8_t *nl = memchr(line, '\n', (size_t)(stop - line));
        const uint8_t *end = nl ? nl : stop;
        if ((size_t)++number > s->max_rows) { /* more lines than counted: the buffer changed */
            s->changed = 1;
            return;
        }
        const uint8_t *p = skip_white(line, end);
        if (p < end) {
            int reason = 0;
            if (*p == '{') {
                Py_ssize_t nkeys = s->nkeys, nentries = s->nentries;
                size_t extra_len = s->extra.len;
                s->ntouched = 0;
                int got = object_line(s, p, end);
                if (got == F_NOMEM || s->nomem) {
                    s->nomem = 1;
                    return;
                }
                if (got == 0) {
                    s->lines[s->rows++] = (int32_t)number;
                } else {
                    rollback(s, s->rows, nkeys, nentries, extra_len);
                    reason = got == -1 ? R_TRAILING : got == F_DEPTH ? R_TOO_DEEP : R_MALFORMED;
                }
            } else {
                reason = not_object(s, p, end);
            }
            if (reason) {
                if (!utf8_valid(line, end)) reason = R_NOT_UTF8;
                if (add_bad(s, number, reason, (size_t)(line - base), (size_t)(end - base))) {
                    s->nomem = 1;
                    return;
                }
            }
        }
        if (!nl) break;
        line = nl + 1;
        if (line == stop) break; /* a final newline ends the last line; it does not start one */
    }
}

/* -- Python --------------------------------------------------------------------------------- */
/* Memory the scan allocated, handed to Python as it is: a read-only buffer that frees it. */
typedef struct {
    PyObject_HEAD void *p;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *o) {
    free(o->p);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int owned_getbuffer(Owned *o, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)o, o->p, o->len, 1, flags);
}

static PyBufferProcs owned_buffer = {.bf_getbuffer = (getbufferproc)owned_getbuffer};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ndjson_arrow._scan.Buffer",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of a scan's result (read-only buffer).",
};

/* A buffer owning ``*p`` (which becomes NULL: the caller no longer frees it), or NULL. */
static PyObject *own(void **p, size_t len) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    o->p = *p;
    o->len = (Py_ssize_t)len;
    *p = NULL;
    return (PyObject *)o;
}

static void scan_free(Scan *s) {
    for (Py_ssize_t k = 0; k < s->nkeys; k++) key_free(&s->keys[k]);
    free(s->keys);
    free(s->table);
    free(s->entries);
    free(s->extra.p);
    free(s->touched);
    free(s->scratch.p);
    free(s->stack);
    free(s->lines);
    free(s->bad);
}

static PyObject *bytes_of(const void *p, size_t n) {
    return PyBytes_FromStringAndSize(n ? (const char *)p : "", (Py_ssize_t)n);
}

/* n copies of v (a column's run of NULL rows, as offsets) */
static inline void fill32(int32_t *restrict p, int64_t n, int32_t v) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) p[i] = p[i + 1] = p[i + 2] = p[i + 3] = v;
    for (; i < n; i++) p[i] = v;
}

/* A column as Arrow's (offsets, data, validity or None, null count) for ``rows`` rows, built from
 * its cells in one pass in row order; or None when every value is NULL. The buffers move to Python. */
static PyObject *column_result(Scan *s, Key *key) {
    int64_t rows = s->rows, n = key->ncells;
    if (rows == 0 || n == 0) Py_RETURN_NONE;
    int32_t *offsets = malloc(((size_t)rows + 1) * sizeof(int32_t));
    uint8_t *valid = n == rows ? NULL : calloc(((size_t)rows + 7) >> 3, 1);
    if (!offsets || (n != rows && !valid) || (!key->data.p && !(key->data.p = malloc(1)))) {
        free(offsets);
        free(valid);
        return PyErr_NoMemory();
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
    PyObject *validity = valid ? own((void **)&valid, ((size_t)rows + 7) >> 3) : Py_NewRef(Py_None);
    PyObject *offs = own((void **)&offsets, ((size_t)rows + 1) * sizeof(int32_t));
    PyObject *data = own((void **)&key->data.p, key->data.len);
    free(offsets); /* still ours if own() failed */
    free(valid);
    if (!validity || !offs || !data) {
        Py_XDECREF(validity);
        Py_XDECREF(offs);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNL)", offs, data, validity, (long long)(rows - n));
}

/* The extra list as a map column's parts: (row offsets, row validity, null rows, key offsets,
 * key bytes, value offsets, value bytes, entries), all offsets int32; or None when empty. */
static PyObject *extra_result(Scan *s) {
    Py_ssize_t live = 0;
    size_t key_bytes = 0, value_bytes = 0;
    for (Py_ssize_t i = 0; i < s->nentries; i++) {
        if (s->entries[i].len < 0) continue;
        live++;
        key_bytes += s->keys[s->entries[i].key].name_len;
        value_bytes += (size_t)s->entries[i].len;
    }
    if (live == 0) Py_RETURN_NONE;
    if (key_bytes > INT32_MAX || value_bytes > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "extra values over 2 GiB in one chunk");
        return NULL;
    }
    int64_t rows = s->rows;
    int32_t *row_off = calloc((size_t)rows + 1, sizeof(int32_t));
    uint8_t *valid = calloc(((size_t)rows + 7) >> 3, 1);
    int32_t *key_off = malloc(((size_t)live + 1) * sizeof(int32_t));
    int32_t *val_off = malloc(((size_t)live + 1) * sizeof(int32_t));
    char *kdata = malloc(key_bytes ? key_bytes : 1);
    char *vdata = malloc(value_bytes ? value_bytes : 1);
    PyObject *result = NULL;
    if (!row_off || !valid || !key_off || !val_off || !kdata || !vdata) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t j = 0;
    size_t kl = 0, vl = 0;
    key_off[0] = val_off[0] = 0;
    for (Py_ssize_t i = 0; i < s->nentries; i++) { /* entries are in row order already */
        Entry *e = &s->entries[i];
        if (e->len < 0) continue;
        Key *key = &s->keys[e->key];
        memcpy(kdata + kl, key->name, key->name_len);
        kl += key->name_len;
        if (e->len) memcpy(vdata + vl, s->extra.p + e->start, (size_t)e->len); /* only empty ones: extra.p NULL */
        vl += (size_t)e->len;
        j++;
        key_off[j] = (int32_t)kl;
        val_off[j] = (int32_t)vl;
        row_off[e->row + 1]++;
        valid[e->row >> 3] |= (uint8_t)(1u << (e->row & 7));
    }
    int64_t nulls = 0;
    for (int64_t r = 0; r < rows; r++) {
        nulls += row_off[r + 1] == 0;
        row_off[r + 1] += row_off[r];
    }
    result = Py_BuildValue(
        "(NNLNNNNn)",
        bytes_of(row_off, ((size_t)rows + 1) * sizeof(int32_t)),
        bytes_of(valid, ((size_t)rows + 7) >> 3),
        (long long)nulls,
        bytes_of(key_off, ((size_t)live + 1) * sizeof(int32_t)),
        bytes_of(kdata, kl),
        bytes_of(val_off, ((size_t)live + 1) * sizeof(int32_t)),
        bytes_of(vdata, vl),
        live);
done:
    free(row_off);
    free(valid);
    free(key_off);
    free(val_off);
    free(kdata);
    free(vdata);
    return result;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *known;
    Py_ssize_t room;
    if (!PyArg_ParseTuple(args, "y*On", &view, &known, &room)) return NULL;
    Scan s;
    memset(&s, 0, sizeof(s));
    s.first = -1;
    s.room = room < 0 ? 0 : room;
    PyObject *result = NULL, *names = NULL, *columns = NULL, *bad = NULL, *extra = NULL, *lines = NULL;
    PyObject *seq = PySequence_Fast(known, "known keys must be a sequence of str");
    if (!seq) goto out;
    Py_ssize_t nknown = PySequence_Fast_GET_SIZE(seq);
    s.stack = malloc(MAX_DEPTH + 1);
    if (!s.stack || table_build(&s, 64)) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nknown; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t n;
        const char *name = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &n) : NULL;
        if (!name) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "known keys must be str");
            goto out;
        }
        uint64_t h = hash_bytes((const uint8_t *)name, (size_t)n);
        if (key_find(&s, (const uint8_t *)name, (size_t)n, h) >= 0) {
            PyErr_Format(PyExc_ValueError, "known key %R given twice", item);
            goto out;
        }
        if (key_add(&s, (const uint8_t *)name, (size_t)n, h, 0) < 0) {
            PyErr_NoMemory();
            goto out;
        }
    }
    s.known = nknown;
    if (view.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "scan takes at most 2 GiB at a time");
        goto out;
    }
    {
        const uint8_t *p = view.buf, *stop = p + view.len;
        size_t lines = 1;
        while ((p = memchr(p, '\n', (size_t)(stop - p))) != NULL) {
            lines++;
            p++;
        }
        s.max_rows = lines;
    }
    s.lines = malloc(s.max_rows * sizeof(int32_t));
    if (!s.lines) {
        PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    scan_all(&s, (const uint8_t *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    if (s.nomem) {
        PyErr_NoMemory();
        goto out;
    }
    if (s.changed) {
        PyErr_SetString(PyExc_RuntimeError, "the input buffer was written to while it was scanned");
        goto out;
    }
    names = PyList_New(0);
    columns = PyList_New(0);
    bad = PyList_New(0);
    if (!names || !columns || !bad) goto out;
    for (Py_ssize_t k = 0; k < s.nkeys; k++) {
        Key *key = &s.keys[k];
        if (key->spilled) continue;
        if (k >= nknown) {
            PyObject *name = PyUnicode_DecodeUTF8(key->name, (Py_ssize_t)key->name_len, "strict");
            if (!name || PyList_Append(names, name)) {
                Py_XDECREF(name);
                goto out;
            }
            Py_DECREF(name);
        }
        PyObject *col = column_result(&s, key);
        if (!col || PyList_Append(columns, col)) {
            Py_XDECREF(col);
            goto out;
        }
        Py_DECREF(col);
    }
    for (size_t i = 0; i < s.nbad; i += 4) {
        PyObject *t = Py_BuildValue("(LLLL)", (long long)s.bad[i], (long long)s.bad[i + 1], (long long)s.bad[i + 2],
                                    (long long)s.bad[i + 3]);
        if (!t || PyList_Append(bad, t)) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    extra = extra_result(&s);
    if (!extra) goto out;
    lines = own((void **)&s.lines, (size_t)s.rows * sizeof(int32_t));
    if (!lines) goto out;
    result = Py_BuildValue("(OOOLOO)", names, columns, lines, (long long)s.rows, bad, extra);
out:
    Py_XDECREF(seq);
    Py_XDECREF(names);
    Py_XDECREF(columns);
    Py_XDECREF(bad);
    Py_XDECREF(extra);
    Py_XDECREF(lines);
    scan_free(&s);
    PyBuffer_Release(&view);
    return result;
}

/* LF bytes in p[0..n): a loop the compiler turns into vector compares (SSE2 is baseline x86-64) */
__attribute__((optimize("O3"))) static size_t count_lf(const uint8_t *p, size_t n) {
    size_t count = 0;
    while (n) {
        size_t block = n < 255 * 16 ? n : 255 * 16; /* a byte counter per lane holds 255 */
        uint8_t lanes[16] = {0};
        for (size_t i = 0; i + 16 <= block; i += 16)
            for (int k = 0; k < 16; k++) lanes[k] += p[i + k] == '\n';
        for (int k = 0; k < 16; k++) count += lanes[k];
        for (size_t i = block & ~(size_t)15; i < block; i++) count += p[i] == '\n';
        p += block;
        n -= block;
    }
    return count;
}

static PyObject *newlines(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start = 0, end = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "y*|nn", &view, &start, &end)) return NULL;
    if (end > view.len) end = view.len;
    if (start < 0) start = 0;
    size_t count = 0;
    if (start < end) {
        Py_BEGIN_ALLOW_THREADS
        count = count_lf((const uint8_t *)view.buf + start, (size_t)(end - start));
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(count);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, known, room) -> (new_keys, columns, lines, rows, bad, extra)\n\n"
     "NDJSON bytes -> string columns; see ndjson_arrow.scan for the contract."},
    {"newlines", newlines, METH_VARARGS,
     "newlines(data, start=0, end=len(data)) -> int\n\nHow many LF bytes data[start:end] holds (no copy)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_scan", .m_doc = NULL, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    if (PyType_Ready(&OwnedType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
