/*
 * JSON documents that are not NDJSON, as NDJSON: a file that is one JSON array of objects (an
 * API dump), or objects one after another across lines (pretty-printed), streamed in blocks and
 * written out one record per line, each with the number of the line it starts on.
 *
 * The framer follows strings and brackets only; the scanner validates each record as it does a
 * line. The text is a sequence of JSON values with white space between them; each is a record,
 * except that a top-level array contributes its elements instead, separated by commas (so
 * `[{..},{..}]`, `{..}\n{..}` and `[{..}]\n[{..}]` are all records of objects; an empty array holds
 * none). Nothing of the text is dropped unseen: a comma that separates no two elements (`[,]`, a
 * comma outside an array) and an array that follows another value with nothing between them
 * (`[][]`) are records of their own (`,` and `][`), which the scanner refuses, so each is
 * quarantined at its line; a text that ends inside an array is cut, which the caller reads from
 * ``frame_open_array`` after ``frame_finish``. A line feed inside a record
 * becomes a space (outside strings; inside a string, where JSON forbids it, a 0x01 byte, which
 * keeps the record invalid). A record ends when its brackets balance, at a closing bracket that
 * does not match (the record is then invalid as written), or, for a scalar, at the first byte
 * that cannot continue it. A record longer than ``max_record`` bytes is not copied: its start
 * line, size and first bytes are reported instead. Memory: the records of one block plus one
 * record of at most ``max_record`` bytes.
 */
#ifndef NDJSON_FRAME_CORE_H
#define NDJSON_FRAME_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FRAME_MAX_DEPTH 10000
#define FRAME_HEAD 1000 /* bytes of a long record kept for its report */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} FBuf;

static int fbuf_reserve(FBuf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

typedef struct {
    int64_t line;
    size_t size;
    size_t head; /* its first bytes: Frame.heads[heads_at..heads_at + head) */
    size_t heads_at;
} LongRecord;

typedef struct {
    FBuf out;             /* complete records, a line each, then the record being read */
    size_t done;          /* out[0..done) holds complete records */
    int64_t *starts;      /* the start line of each complete record */
    size_t nstarts, starts_cap;
    LongRecord *longs;    /* records over max_record */
    size_t nlongs, longs_cap;
    FBuf heads;           /* first bytes of long records */
    size_t max_record;
    int64_t line;         /* the line the next byte is on */
    /* the record being read */
    int in_record, atom, in_string, escape, is_long;
    int64_t rec_line;
    size_t rec_size, long_head;
    uint8_t head[FRAME_HEAD]; /* the first bytes of the record being read, once it is too long */
    uint8_t stack[FRAME_MAX_DEPTH];
    size_t depth;         /* open brackets (past FRAME_MAX_DEPTH only counted) */
    int array;            /* inside a top-level array, whose elements are records */
    int64_t array_line;   /* the line the top-level array opened on */
    int want_value;       /* inside an array, after [ or a comma: a comma here separates nothing */
    int adjacent;         /* a top-level value just ended, nothing after it yet */
    int nomem;
} Frame;

static void frame_init(Frame *f, size_t max_record, int64_t first_line) {
    memset(f, 0, sizeof(*f));
    f->max_record = max_record;
    f->line = first_line;
}

static void frame_free(Frame *f) {
    free(f->out.p);
    free(f->starts);
    free(f->longs);
    free(f->heads.p);
    memset(f, 0, sizeof(*f));
}

static void frame_put(Frame *f, uint8_t c);

/* the record being read ends: a line of out, or a long record's report */
static void frame_end(Frame *f) {
    if (f->is_long) {
        if (f->nlongs == f->longs_cap) {
            size_t cap = f->longs_cap ? f->longs_cap * 2 : 16;
            LongRecord *l = realloc(f->longs, cap * sizeof(LongRecord));
            if (!l) {
                f->nomem = 1;
                return;
            }
            f->longs = l;
            f->longs_cap = cap;
        }
        if (fbuf_reserve(&f->heads, f->long_head)) {
            f->nomem = 1;
            return;
        }
        if (f->long_head) memcpy(f->heads.p + f->heads.len, f->head, f->long_head);
        f->longs[f->nlongs++] = (LongRecord){f->rec_line, f->rec_size, f->long_head, f->heads.len};
        f->heads.len += f->long_head;
    } else {
        if (fbuf_reserve(&f->out, 1)) {
            f->nomem = 1;
            return;
        }
        f->out.p[f->out.len++] = '\n';
        if (f->nstarts == f->starts_cap) {
            size_t cap = f->starts_cap ? f->starts_cap * 2 : 256;
            int64_t *s = realloc(f->starts, cap * sizeof(int64_t));
            if (!s) {
                f->nomem = 1;
                return;
            }
            f->starts = s;
            f->starts_cap = cap;
        }
        f->starts[f->nstarts++] = f->rec_line;
        f->done = f->out.len;
    }
    f->in_record = f->atom = f->in_string = f->escape = f->is_long = 0;
    f->depth = 0;
    f->rec_size = f->long_head = 0;
    f->want_value = 0;
    f->adjacent = !f->array;
}

/* A record of ``text`` at ``line``, made of what is not a value (a stray comma, two values with
 * nothing between them): the scanner refuses it, so it is quarantined where it stood. */
static void frame_mark(Frame *f, const char *text, size_t n, int64_t line) {
    f->in_record = 1;
    f->rec_line = line;
    for (size_t i = 0; i < n; i++) frame_put(f, (uint8_t)text[i]);
    frame_end(f);
}


/* one byte of the record being read */
static void frame_put(Frame *f, uint8_t c) {
    f->rec_size++;
    if (f->is_long) return;
    if (f->rec_size > f->max_record) { /* too long: keep its head apart, drop the rest */
        size_t start = f->done;
        size_t head = f->out.len - start < FRAME_HEAD ? f->out.len - start : FRAME_HEAD;
        if (head) memcpy(f->head, f->out.p + start, head);
        f->long_head = head;
        f->out.len = start;
        f->is_long = 1;
        return;
    }
    if (fbuf_reserve(&f->out, 1)) {
        f->nomem = 1;
        return;
    }
    f->out.p[f->out.len++] = c;
}

static inline int frame_white(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* can this byte continue a scalar (a number or literal) at the top level? */
static inline int frame_atom_byte(uint8_t c) {
    return !frame_white(c) && c != ',' && c != '{' && c != '}' && c != '[' && c != ']' && c != ':' && c != '"';
}

/* Frame data[0..n). */
static void frame_feed(Frame *f, const uint8_t *data, size_t n) {
    for (size_t i = 0; i < n && !f->nomem; i++) {
        uint8_t c = data[i];
        if (!f->in_record) {
            if (c == '\n') {
                f->line++;
                f->adjacent = 0;
                continue;
            }
            if (frame_white(c)) {
                f->adjacent = 0;
                continue;
            }
            if (c == ',') {
                /* between two elements of an array it separates them; anywhere else it is a record */
                if (!f->array || f->want_value) frame_mark(f, ",", 1, f->line);
                if (f->array) f->want_value = 1;
                f->adjacent = 0;
                continue;
            }
            if (c == '[' && !f->array) {
                if (f->adjacent) frame_mark(f, "][", 2, f->line); /* two values with nothing between */
                f->array = 1;
                f->array_line = f->line;
                f->want_value = 1;
                f->adjacent = 0;
                continue;
            }
            if (c == ']' && f->array) {
                f->array = 0;
                f->want_value = 0;
                f->adjacent = 1;
                continue;
            }
            f->in_record = 1;
            f->rec_line = f->line;
            frame_put(f, c);
            if (c == '"') {
                f->in_string = 1;
            } else if (c == '{' || c == '[') {
                f->stack[0] = c;
                f->depth = 1;
            } else if (frame_atom_byte(c)) {
                f->atom = 1;
            } else {
                frame_end(f); /* a stray } ] or : is a record of its own (the scanner says why it is bad) */
            }
            continue;
        }
        if (f->atom) {
            if (frame_atom_byte(c)) {
                frame_put(f, c);
                continue;
            }
            frame_end(f);
            i--; /* the byte after a scalar is read again, outside the record */
            continue;
        }
        if (f->in_string) {
            if (c == '\n') {
                f->line++;
                frame_put(f, 0x01); /* a raw line feed in a string: invalid JSON, and kept invalid */
                f->escape = 0;
                continue;
            }
            frame_put(f, c);
            if (f->escape) {
                f->escape = 0;
            } else if (c == '\\') {
                f->escape = 1;
            } else if (c == '"') {
                f->in_string = 0;
                if (f->depth == 0) frame_end(f); /* a top-level string */
            }
            continue;
        }
        if (c == '\n') {
            f->line++;
            frame_put(f, ' ');
            continue;
        }
        frame_put(f, c);
        if (c == '"') {
            f->in_string = 1;
        } else if (c == '{' || c == '[') {
            if (f->depth < FRAME_MAX_DEPTH) f->stack[f->depth] = c;
            f->depth++;
        } else if (c == '}' || c == ']') {
            f->depth--;
            if (f->depth < FRAME_MAX_DEPTH && f->stack[f->depth] != (c == '}' ? '{' : '[')) {
                frame_end(f); /* a closing bracket that does not match: the record ends, invalid */
            } else if (f->depth == 0) {
                frame_end(f);
            }
        }
    }
}

/* The end of the text: a record still open ends here (the scanner says what is wrong with it). An
 * array still open is left open: the text is cut, and ``array_line`` says where it began. */
static void frame_finish(Frame *f) {
    if (f->in_record) frame_end(f);
}

/* The line of the top-level array the text ended inside (after frame_finish), or 0. */
static int64_t frame_open_array(const Frame *f) { return f->array ? f->array_line : 0; }

/* Forget what was handed out: out[0..done), the starts and the long records. */
static void frame_take(Frame *f) {
    size_t rest = f->out.len - f->done;
    if (rest) memmove(f->out.p, f->out.p + f->done, rest);
    f->out.len = rest;
    f->done = 0;
    f->nstarts = 0;
    f->nlongs = 0;
    f->heads.len = 0;
}

/* The start of the first line from i on that is not white space only (n: only white space left). */
static size_t frame_skip_blank_lines(const uint8_t *p, size_t i, size_t n) {
    size_t k = i;
    for (; k < n && frame_white(p[k]); k++)
        if (p[k] == '\n') i = k + 1;
    return k >= n ? n : i;
}

/* How the object that opens at p[i] ('{') goes on, following its strings and brackets: it closes
 * on its line (FRAME_CLOSED, *end at its closing bracket), its line ends first (FRAME_PAST_LINE,
 * *end at that line feed), a line feed falls inside one of its strings, where JSON has none
 * (FRAME_BROKEN), or ``head`` ends first (FRAME_HEAD_END). */
enum { FRAME_CLOSED, FRAME_PAST_LINE, FRAME_BROKEN, FRAME_HEAD_END };
static int frame_object_line(const uint8_t *p, size_t i, size_t n, size_t *end) {
    size_t depth = 0;
    int in_string = 0, escape = 0;
    for (; i < n; i++) {
        uint8_t c = p[i];
        if (in_string) {
            if (escape)
                escape = 0;
            else if (c == '\\')
                escape = 1;
            else if (c == '"')
                in_string = 0;
            else if (c == '\n')
                return FRAME_BROKEN;
            continue;
        }
        if (c == '\n') {
            *end = i;
            return FRAME_PAST_LINE;
        }
        if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            *end = i;
            return FRAME_CLOSED;
        }
    }
    return FRAME_HEAD_END;
}

/* Whether the line at p[i..n) is one whole object standing alone: it starts with '{' in its first
 * column, its brackets balance on it, and only white space follows on the line. 1 yes, 0 no,
 * -1 when ``head`` ends first. */
static int frame_line_is_object(const uint8_t *p, size_t i, size_t n) {
    if (i >= n) return -1;
    if (p[i] != '{') return 0;
    size_t end = 0;
    int how = frame_object_line(p, i, n, &end);
    if (how == FRAME_HEAD_END) return -1;
    if (how != FRAME_CLOSED) return 0; /* the object goes on past its line */
    for (i = end + 1; i < n && p[i] != '\n'; i++)
        if (!frame_white(p[i])) return 0;
    return 1;
}

/* How a text starts: 1 when it is not NDJSON (a top-level array, or a first object that runs past
 * its first line: pretty-printed), 0 when it is, -1 when ``head`` ends before that is known. A
 * first object that runs past its line is NDJSON after all when the next two lines (past blank
 * ones) are whole objects standing alone, or the next one is and the text ends: a first line cut
 * inside its object before whole NDJSON lines (a pretty-printer indents a nested line or ends it
 * with a comma, and an export of one element a line ends with its closing brackets), so the cut
 * line costs only itself instead of becoming one record running to the object's end. */
static int frame_sniff(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n && frame_white(p[i])) i++;
    if (i == n) return -1;
    if (p[i] == '[') return 1;
    if (p[i] != '{') return 0;
    size_t end = 0;
    switch (frame_object_line(p, i, n, &end)) {
    case FRAME_CLOSED: return 0; /* the first object ends on its line */
    case FRAME_BROKEN: return 0; /* a broken first line: NDJSON, where it is one bad line */
    case FRAME_HEAD_END: return -1;
    default: break; /* the first object goes on past its line */
    }
    size_t j = frame_skip_blank_lines(p, end + 1, n);
    if (frame_line_is_object(p, j, n) != 1) return 1; /* pretty-printed (unknown: as before) */
    while (j < n && p[j] != '\n') j++;
    j = j < n ? frame_skip_blank_lines(p, j + 1, n) : n;
    /* and the line after it one too, or the text ends: a first line cut short */
    return j >= n || frame_line_is_object(p, j, n) != 0 ? 0 : 1;
}

#endif
