/* loadgen.client._hotpath: one HTTP/1.1 connection's reads, in C.
 *
 * Why: a streamed response of N tokens is N SSE events; in Python each costs microseconds of
 * interpreter work (protocol callbacks, the HTTP parser's payload queue, splitting, counting),
 * which capped one core at ~265k chunks/s and, under paced load, delayed the loop that stamps
 * every chunk. Here one call per socket read (the event loop's reader callback) does the
 * receive, HTTP chunked decoding, SSE splitting and the token count of each usage-counted
 * chunk, and appends the chunk's time and count to the request's record.
 *
 * Times: each read is stamped by the kernel (SO_TIMESTAMPNS: when the newest of its bytes reached
 * the socket), not by when the loop got to them: a busy loop no longer moves a chunk's time. Only
 * a read that holds several events can be late for the earlier ones (the kernel merges arrivals
 * and keeps the later time), by at most the read's time less the moment its bytes can first
 * have come: after this connection's previous read, and after the loop's select() before the one
 * that reported them (selectclock.SelectClock.floor_ns). From it, per chunk, how far off the gap
 * ending at it can be: what the self-check judges on this path (bounds(); the first chunk's, the
 * TTFT's, is the request's read delay). Without kernel
 * times, the time the loop's select() returned, as the Python path stamps.
 *
 * Anything not on the common path (a chunk without usage, an error, a usage-only chunk, draft
 * counts, a reasoning or tool-call key, text kept for a tokenizer, other SSE fields) is handed
 * to the Python code that reads it on the pure-Python path (loadgen/client/events.py), in order,
 * so both paths record the same thing by the same rules.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef SCM_TIMESTAMPNS
#define SCM_TIMESTAMPNS SO_TIMESTAMPNS
#endif

#define READ_SIZE (256 * 1024)
#define MAX_HEAD (64 * 1024)
#define MAX_BODY (64 * 1024)
#define LOCAL_CHUNKS 512

/* what the reader tells its owner (notify(code)) */
enum { N_HEAD = 1, N_DONE = 2, N_EOF = 3, N_ERROR = 4 };
/* where the response is */
enum { S_IDLE = 0, S_HEAD, S_BODY, S_DONE };
/* how the body is framed */
enum { B_CHUNKED = 1, B_LENGTH = 2, B_CLOSE = 3 };
/* chunked framing */
/* chunked framing, as strict as aiohttp's parser (llhttp): hex digits, optional spaces, an
 * optional ;extension, CRLF. An empty size line, a size followed by anything else (`1 zzz`) and
 * a size line of digits ended by a bare LF are framing errors; the bare LFs llhttp lets pass (after
 * an extension, after chunk data, in the trailer) pass here too (tests/test_hotpath.py, both
 * paths, over real sockets). */
enum {
    C_SIZE = 0,
    C_SIZE_WS,
    C_EXT,
    C_SIZE_LF,
    C_DATA,
    C_DATA_CR,
    C_DATA_LF,
    C_TRAILER_START,
    C_TRAILER_LINE,
    C_TRAILER_LF
};
/* An SSE event larger than this fails its request as malformed: a server that never ends an
 * event must not make the client hold (and rescan) all it sends. loadgen/client/sse.py's bound. */
#define MAX_EVENT (8 * 1024 * 1024)

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_add(Buf *b, const char *data, Py_ssize_t n) {
    if (n <= 0)
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

typedef struct {
    PyObject_HEAD
    int fd;
    int stamped;         /* the socket gives kernel receive times */
    PyObject *notify;    /* notify(code) */
    PyObject *clock;     /* the loop's stream.SelectClock, or None */
    /* the response in progress */
    int state, mode, sse, cstate;
    long long remaining; /* chunked: bytes left in this chunk; length: bytes left in the body */
    int ndigits;         /* chunked: hex digits read of the size line */
    Buf head, body, pending;
    int leftover;        /* bytes came after the body ended: the connection cannot be reused */
    PyObject *error;     /* the exception that ended the response (N_ERROR) */
    /* the record */
    PyObject *rec, *slow, *parse_block;
    PyObject *t_arr, *u_arr, *c_arr;
    int python_only, all_slow, need_prompt, done, usage_dirty, warmup;
    long long last, usage;
    long long lt[LOCAL_CHUNKS], lu[LOCAL_CHUNKS], lc[LOCAL_CHUNKS];
    int nloc;
    /* times */
    long long t, t_head, t_last;
    long long prev_recv; /* when this connection's previous read was made */
    long long nchunks;   /* token chunks recorded for this response */
    long long prev_bound; /* how late its last chunk's time can be */
} Conn;

/* One receive buffer for every connection: a read is processed whole before the call returns
 * (what must outlive it is copied), so 256 streams need not hold 64 MiB between reads. */
static char rbuf[READ_SIZE];
/* the body broke HTTP's framing; an SSE event outgrew MAX_EVENT (loadgen.client.compiled maps
 * them to the records' connection_error and malformed_sse) */
static PyObject *FramingError, *EventTooLarge;

static PyObject *str_frombytes, *str_usage_completion_tokens, *str_prompt_tokens, *str_finish_reason,
    *str_read_delay_ns, *str_chunk_usage, *str_chunk_phase, *str_chunk_t_ns, *str_chunk_chars, *str_chunk_text,
    *str_token_ids, *str_done, *str_warmup, *str_returned_ns, *str_floor_ns;

static long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void conn_clear_rec(Conn *c) {
    Py_CLEAR(c->rec);
    Py_CLEAR(c->slow);
    Py_CLEAR(c->parse_block);
    Py_CLEAR(c->t_arr);
    Py_CLEAR(c->u_arr);
    Py_CLEAR(c->c_arr);
}

static int Conn_init(Conn *c, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"fd", "notify", "clock", NULL};
    int fd;
    PyObject *notify, *clock = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO|O", kwlist, &fd, &notify, &clock))
        return -1;
    c->fd = fd;
    Py_XSETREF(c->notify, Py_NewRef(notify));
    Py_XSETREF(c->clock, Py_NewRef(clock));
    int on = 1;
    c->stamped = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) == 0;
    return 0;
}

/* The garbage collector's view: a connection's owner holds it and it holds its owner's
 * callback (a cycle), so it must be traversable to be freed. */
static int Conn_traverse(Conn *c, visitproc visit, void *arg) {
    Py_VISIT(c->notify);
    Py_VISIT(c->clock);
    Py_VISIT(c->error);
    Py_VISIT(c->rec);
    Py_VISIT(c->slow);
    Py_VISIT(c->parse_block);
    Py_VISIT(c->t_arr);
    Py_VISIT(c->u_arr);
    Py_VISIT(c->c_arr);
    return 0;
}

static int Conn_clear(Conn *c) {
    conn_clear_rec(c);
    Py_CLEAR(c->notify);
    Py_CLEAR(c->clock);
    Py_CLEAR(c->error);
    return 0;
}

static void Conn_dealloc(Conn *c) {
    PyObject_GC_UnTrack(c);
    conn_clear_rec(c);
    Py_CLEAR(c->notify);
    Py_CLEAR(c->clock);
    Py_CLEAR(c->error);
    PyMem_Free(c->head.p);
    PyMem_Free(c->body.p);
    PyMem_Free(c->pending.p);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* ---- the record ---------------------------------------------------------------------- */

static int last_usage(Conn *c, long long *out) {
    Py_ssize_t n = PySequence_Length(c->u_arr);
    if (n < 0)
        return -1;
    if (n == 0) {
        *out = 0;
        return 0;
    }
    PyObject *v = PySequence_GetItem(c->u_arr, n - 1);
    if (!v)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* After Python code touched the record: what the fast path assumes, read again. */
static int resync(Conn *c) {
    if (last_usage(c, &c->last) < 0)
        return -1;
    PyObject *v = PyObject_GetAttr(c->rec, str_chunk_phase);
    if (!v)
        return -1;
    c->all_slow = v != Py_None;
    Py_DECREF(v);
    v = PyObject_GetAttr(c->rec, str_prompt_tokens);
    if (!v)
        return -1;
    c->need_prompt = v == Py_None;
    Py_DECREF(v);
    v = PyObject_GetAttr(c->rec, str_done);
    if (!v)
        return -1;
    c->done = PyObject_IsTrue(v);
    Py_DECREF(v);
    return 0;
}

static int extend(PyObject *arr, long long *vals, int n) {
    PyObject *mv = PyMemoryView_FromMemory((char *)vals, (Py_ssize_t)n * sizeof(long long), PyBUF_READ);
    if (!mv)
        return -1;
    PyObject *r = PyObject_CallMethodOneArg(arr, str_frombytes, mv);
    Py_DECREF(mv);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int set_ll(PyObject *o, PyObject *name, long long v) {
    PyObject *x = PyLong_FromLongLong(v);
    if (!x)
        return -1;
    int r = PyObject_SetAttr(o, name, x);
    Py_DECREF(x);
    return r;
}

/* Per chunk, how far off the gap ending at it can be, process-wide, for the run's self-check: bins
 * exact below 8 ns, then 8 to an octave (read back as the bin's top: at most 1/8 over). */
#define BOUND_BINS (8 + 61 * 8)
static long long bound_hist[BOUND_BINS];
/* the reads that held token chunks, process-wide: [0] timed at select()'s return (no kernel
 * stamp came), [1] by the kernel's receive stamp; what the self-check reports as chunk_times */
static long long reads_by_stamp[2];

static int bound_bin(long long v) {
    if (v < 8)
        return v < 0 ? 0 : (int)v;
    int e = 63 - __builtin_clzll((unsigned long long)v);
    return 8 + (e - 3) * 8 + (int)((v >> (e - 3)) & 7);
}

static long long bin_top(int b) {
    if (b < 8)
        return b;
    int e = (b - 8) / 8 + 3, sub = (b - 8) % 8;
    return ((long long)(8 + sub + 1) << (e - 3)) - 1;
}

/* The chunks noted since the last flush, appended to the record's arrays. */
static int flush(Conn *c) {
    if (!c->rec)
        return 0;
    if (c->nloc) {
        if (extend(c->t_arr, c->lt, c->nloc) < 0 || extend(c->u_arr, c->lu, c->nloc) < 0 ||
            extend(c->c_arr, c->lc, c->nloc) < 0)
            return -1;
        c->nloc = 0;
    }
    if (c->usage_dirty) {
        if (set_ll(c->rec, str_usage_completion_tokens, c->usage) < 0)
            return -1;
        c->usage_dirty = 0;
    }
    return 0;
}

/* One event through the Python reader (events.on_event), in order with the fast ones. */
static int slow_event(Conn *c, const char *p, Py_ssize_t n) {
    if (flush(c) < 0)
        return -1;
    Py_ssize_t before = PySequence_Length(c->t_arr);
    if (before < 0)
        return -1;
    PyObject *r = PyObject_CallFunction(c->slow, "y#L", p, n, c->t);
    if (!r)
        return -1;
    Py_DECREF(r);
    if (resync(c) < 0)
        return -1;
    Py_ssize_t after = PySequence_Length(c->t_arr);
    if (after < 0)
        return -1;
    c->nchunks += after - before;
    return 0;
}

static const char *find(const char *h, Py_ssize_t hn, const char *needle, Py_ssize_t nn) {
    return memmem(h, hn, needle, nn);
}

static int is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* `\s*(\d+)` at q: 1 and the number, 0 if no digit comes, -1 if too long for 64 bits. */
static int read_int(const char *q, const char *end, long long *out) {
    while (q < end && is_space(*q))
        q++;
    if (q >= end || *q < '0' || *q > '9')
        return 0;
    long long v = 0;
    int digits = 0;
    while (q < end && *q >= '0' && *q <= '9') {
        if (++digits > 18)
            return -1;
        v = v * 10 + (*q++ - '0');
    }
    *out = v;
    return 1;
}

/* What the fast path needs of one event, in one pass over its quotes. Every byte pattern the
 * Python reader looks for (loadgen/client/events.py, phases.py) begins with a quote, so looking
 * at each quote finds each pattern's first match as its regex search does. */
#define MAX_MARKS 16
#define MAX_MARK_LEN 64
static char marks[MAX_MARKS][MAX_MARK_LEN];
static size_t mark_len[MAX_MARKS];
static int n_marks = 0;

typedef struct {
    int slow; /* something only the Python reader reads: an error, a usage-only chunk, draft
                 counts, a reasoning or tool-call key, a count too long */
    int has_cum, has_prompt;
    long long cum, prompt;
    const char *fr; /* the finish reason's text, when a string */
    Py_ssize_t frn;
} Scan;

#define KEY(lit) (end - q >= (Py_ssize_t)sizeof lit - 1 && memcmp(q, lit, sizeof lit - 1) == 0)

static void scan(const char *p, Py_ssize_t n, Scan *s) {
    const char *end = p + n, *q = p;
    memset(s, 0, sizeof *s);
    /* per-request draft counts: an event holding any dialect's drafted key (set_marks, from
       loadgen/client/events.py's MARKS) is read in full by the Python reader, as here */
    for (int i = 0; i < n_marks; i++) {
        if (memmem(p, n, marks[i], mark_len[i]) != NULL) {
            s->slow = 1;
            return;
        }
    }
    while ((q = memchr(q, '"', end - q)) != NULL && end - q > 2) {
        switch (q[1]) {
        case 'c':
            if (!s->has_cum && KEY("\"completion_tokens\":")) {
                int r = read_int(q + 20, end, &s->cum);
                s->has_cum = r > 0;
                s->slow |= r < 0;
            } else if (KEY("\"choices\":")) { /* "choices": [ ]: a usage-only chunk */
                const char *r = q + 10;
                while (r < end && is_space(*r))
                    r++;
                if (r < end && *r == '[') {
                    r++;
                    while (r < end && is_space(*r))
                        r++;
                    s->slow |= r < end && *r == ']';
                }
            }
            break;
        case 'p':
            if (!s->has_prompt && KEY("\"prompt_tokens\":")) {
                int r = read_int(q + 16, end, &s->prompt);
                s->has_prompt = r > 0;
                s->slow |= r < 0;
            }
            break;
        case 'f':
            if (!s->fr && KEY("\"finish_reason\":")) {
                const char *r = q + 16;
                while (r < end && is_space(*r))
                    r++;
                if (r < end && *r == '"') {
                    const char *e = memchr(r + 1, '"', end - r - 1);
                    if (e) {
                        s->fr = r + 1;
                        s->frn = e - r - 1;
                    }
                }
            }
            break;
        case 'e':
            s->slow |= KEY("\"error\"");
            break;
        case 'r':
            s->slow |= KEY("\"reasoning");
            break;
        case 't':
            s->slow |= KEY("\"tool_calls\"");
            break;
        }
        if (s->slow)
            return;
        q++;
    }
}

/* One SSE data payload. */
static int on_event(Conn *c, const char *p, Py_ssize_t n) {
    if (c->done)
        return 0; /* anything after [DONE] is ignored */
    if (c->python_only || c->all_slow || n < 2 || p[0] != '{' || p[n - 1] != '}' || c->last < 0)
        return slow_event(c, p, n);
    Scan s;
    scan(p, n, &s);
    if (s.slow || !s.has_cum)
        return slow_event(c, p, n);
    if (s.fr) {
        PyObject *f = PyUnicode_DecodeUTF8(s.fr, s.frn, NULL);
        if (!f) {
            PyErr_Clear();
            return slow_event(c, p, n);
        }
        int r = PyObject_SetAttr(c->rec, str_finish_reason, f);
        Py_DECREF(f);
        if (r < 0)
            return -1;
    }
    if (c->need_prompt && s.has_prompt) {
        if (set_ll(c->rec, str_prompt_tokens, s.prompt) < 0)
            return -1;
        c->need_prompt = 0;
    }
    long long cum = s.cum;
    c->usage = cum;
    c->usage_dirty = 1;
    if (cum > c->last) {
        if (c->nloc == LOCAL_CHUNKS && flush(c) < 0)
            return -1;
        c->lt[c->nloc] = c->t;
        c->lu[c->nloc] = cum;
        c->lc[c->nloc] = -1; /* not read: the usage makes the count exact */
        c->nloc++;
        c->nchunks++;
        c->last = cum;
    }
    return 0;
}

/* Decoded body bytes of an event stream: split into events (a blank line ends one). */
static int on_sse(Conn *c, const char *data, Py_ssize_t n) {
    Buf *b = &c->pending;
    if (buf_add(b, data, n) < 0)
        return -1;
    if (memchr(b->p, '\r', b->len)) { /* CRLF line ends, as Python's SSEDecoder: \r\n -> \n */
        Py_ssize_t w = 0;
        for (Py_ssize_t r = 0; r < b->len; r++) {
            if (b->p[r] == '\r' && r + 1 < b->len && b->p[r + 1] == '\n')
                continue;
            b->p[w++] = b->p[r];
        }
        b->len = w;
    }
    const char *s = b->p, *end = b->p + b->len, *q = b->p;
    int lines = 0; /* newlines inside the block so far: a block of one line is the common case */
    while ((q = memchr(q, '\n', end - q)) != NULL) {
        if (q + 1 >= end)
            break; /* the blank line may be in the next read */
        if (q[1] != '\n') {
            lines++;
            q++;
            continue;
        }
        Py_ssize_t len = q - s;
        if (len >= 6 && !lines && memcmp(s, "data: ", 6) == 0) {
            if (on_event(c, s + 6, len - 6) < 0)
                return -1;
        } else if (len) { /* comments, other fields, several data lines: Python's parser */
            if (flush(c) < 0)
                return -1;
            PyObject *payload = PyObject_CallFunction(c->parse_block, "y#", s, len);
            if (!payload)
                return -1;
            int r = 0;
            if (payload != Py_None) {
                char *pp;
                Py_ssize_t pn;
                r = PyBytes_AsStringAndSize(payload, &pp, &pn);
                if (r == 0)
                    r = on_event(c, pp, pn);
            }
            Py_DECREF(payload);
            if (r < 0)
                return -1;
        }
        s = q = q + 2;
        lines = 0;
    }
    Py_ssize_t rest = end - s;
    if (rest > MAX_EVENT) { /* an event that never ends: the request fails, the buffer is let go */
        b->len = 0;
        PyErr_Format(EventTooLarge, "an SSE event over %d MiB without its blank line", MAX_EVENT >> 20);
        return -1;
    }
    if (rest && s != b->p)
        memmove(b->p, s, rest);
    b->len = rest;
    return 0;
}

static int on_body(Conn *c, const char *data, Py_ssize_t n) {
    if (c->sse)
        return on_sse(c, data, n);
    if (c->body.len < MAX_BODY)
        return buf_add(&c->body, data, n < MAX_BODY - c->body.len ? n : MAX_BODY - c->body.len);
    return 0;
}

static PyObject *fault(const char *msg) {
    PyErr_SetString(FramingError, msg);
    return NULL;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Body bytes as framed on the wire; returns how many were the body's (the rest came after it). */
static Py_ssize_t on_framed(Conn *c, const char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    if (c->mode == B_CLOSE) {
        if (on_body(c, p, n) < 0)
            return -1;
        return n;
    }
    if (c->mode == B_LENGTH) {
        Py_ssize_t take = (long long)n < c->remaining ? n : (Py_ssize_t)c->remaining;
        if (on_body(c, p, take) < 0)
            return -1;
        c->remaining -= take;
        if (c->remaining == 0)
            c->state = S_DONE;
        return take;
    }
    while (i < n && c->state == S_BODY) {
        char ch = p[i];
        switch (c->cstate) {
        case C_SIZE: {
            int h = hexval(ch);
            if (h >= 0) {
                if (c->remaining > (1LL << 40)) {
                    fault("chunk size too large");
                    return -1;
                }
                c->remaining = c->remaining * 16 + h;
                c->ndigits++;
            } else if (c->ndigits && ch == ';') {
                c->cstate = C_EXT;
            } else if (c->ndigits && (ch == ' ' || ch == '\t')) {
                c->cstate = C_SIZE_WS;
            } else if (c->ndigits && ch == '\r') {
                c->cstate = C_SIZE_LF;
            } else {
                fault(c->ndigits ? "invalid character in chunk size" : "empty chunk size");
                return -1;
            }
            i++;
            break;
        }
        case C_SIZE_WS:
            if (ch == ';')
                c->cstate = C_EXT;
            else if (ch == '\r')
                c->cstate = C_SIZE_LF;
            else if (ch != ' ' && ch != '\t') {
                fault("invalid character in chunk size");
                return -1;
            }
            i++;
            break;
        case C_EXT: /* an extension's line may end in a bare LF: llhttp lets it pass */
            if (ch == '\r')
                c->cstate = C_SIZE_LF;
            else if (ch == '\n')
                c->cstate = c->remaining ? C_DATA : C_TRAILER_START;
            i++;
            break;
        case C_SIZE_LF:
            if (ch != '\n') {
                fault("invalid chunk size line");
                return -1;
            }
            c->cstate = c->remaining ? C_DATA : C_TRAILER_START;
            i++;
            break;
        case C_DATA: {
            Py_ssize_t take = (long long)(n - i) < c->remaining ? n - i : (Py_ssize_t)c->remaining;
            if (on_body(c, p + i, take) < 0)
                return -1;
            c->remaining -= take;
            i += take;
            if (c->remaining == 0)
                c->cstate = C_DATA_CR;
            break;
        }
        case C_DATA_CR: /* a bare LF here aiohttp's parser accepts too */
            if (ch == '\r')
                c->cstate = C_DATA_LF;
            else if (ch == '\n') {
                c->cstate = C_SIZE;
                c->ndigits = 0;
            } else {
                fault("chunk data not followed by CRLF");
                return -1;
            }
            i++;
            break;
        case C_DATA_LF:
            if (ch != '\n') {
                fault("chunk data not followed by CRLF");
                return -1;
            }
            c->cstate = C_SIZE;
            c->ndigits = 0;
            i++;
            break;
        case C_TRAILER_START: /* trailer lines may end in a bare LF, as llhttp lets them */
            if (ch == '\r')
                c->cstate = C_TRAILER_LF;
            else if (ch == '\n')
                c->state = S_DONE;
            else
                c->cstate = C_TRAILER_LINE;
            i++;
            break;
        case C_TRAILER_LINE:
            if (ch == '\n')
                c->cstate = C_TRAILER_START;
            i++;
            break;
        case C_TRAILER_LF:
            if (ch != '\n') {
                fault("invalid trailer");
                return -1;
            }
            c->state = S_DONE;
            i++;
            break;
        }
    }
    return i;
}

static int notify(Conn *c, int code) {
    if (!c->notify) /* closed */
        return 0;
    PyObject *r = PyObject_CallFunction(c->notify, "i", code);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Bytes of one read (or given to feed()), at time c->t. 0, or -1 with an exception set. */
static int process(Conn *c, const char *p, Py_ssize_t n) {
    while (n > 0) {
        if (c->state == S_HEAD) {
            Py_ssize_t old = c->head.len;
            if (buf_add(&c->head, p, n) < 0)
                return -1;
            /* the blank line may straddle reads: look from 3 bytes before the new ones */
            Py_ssize_t from = old > 3 ? old - 3 : 0;
            const char *e = find(c->head.p + from, c->head.len - from, "\r\n\r\n", 4);
            if (!e) {
                if (c->head.len > MAX_HEAD) {
                    fault("response head over 64 KiB");
                    return -1;
                }
                return 0;
            }
            Py_ssize_t used = (e + 4 - c->head.p) - old; /* of the new bytes */
            c->head.len = e + 4 - c->head.p;
            c->t_head = c->t;
            c->state = S_IDLE; /* until the owner says how the body comes (begin_body) */
            if (notify(c, N_HEAD) < 0)
                return -1;
            p += used;
            n -= used;
            if (c->state == S_HEAD) /* a 1xx response: the next head follows */
                continue;
            if (c->state == S_DONE) { /* a response with no body */
                if (n > 0)
                    c->leftover = 1;
                if (flush(c) < 0)
                    return -1;
                return notify(c, N_DONE);
            }
            if (c->state != S_BODY) {
                if (n > 0)
                    c->leftover = 1;
                return 0;
            }
            continue;
        }
        if (c->state == S_BODY) {
            Py_ssize_t used = on_framed(c, p, n);
            if (used < 0)
                return -1;
            p += used;
            n -= used;
            if (c->state == S_DONE) {
                if (flush(c) < 0)
                    return -1;
                if (n > 0)
                    c->leftover = 1;
                return notify(c, N_DONE);
            }
            continue;
        }
        c->leftover = 1; /* bytes with no response to take them */
        return 0;
    }
    return flush(c);
}

static void fail(Conn *c) {
    PyObject *type, *value, *tb;
    if (!PyErr_Occurred()) /* every path that fails sets its exception; one that did not is named */
        PyErr_SetString(PyExc_SystemError, "loadgen's compiled reader failed without setting an exception");
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    Py_XSETREF(c->error, value ? value : Py_NewRef(Py_None));
    c->state = S_DONE;
    if (notify(c, N_ERROR) < 0)
        PyErr_WriteUnraisable(c->notify);
}

static long long loop_time(Conn *c, long long now) {
    /* when the loop's select() returned, as the Python path stamps (no kernel times) */
    if ((!c->clock || c->clock == Py_None))
        return now;
    PyObject *v = PyObject_GetAttr(c->clock, str_returned_ns);
    long long t = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    if (t <= 0) {
        PyErr_Clear();
        return now;
    }
    return t;
}

/* The k chunks of one read at time t: how late each chunk's time can be, and from that how far
 * off the span ending at it can be (the gap from the chunk before, or the TTFT for the first).
 * The read's last event ended with its newest bytes unless more bytes came after it (part of the
 * next event): then exact. The others came at the earliest after this connection's previous read
 * and after the select before the one that reported the read. A gap measured between two times
 * late by e1 <= b1 and e2 <= b2 is off by at most max(b1, b2): the histogram holds that per
 * chunk, so its percentiles bound the ITL's error; the first chunk's is the request's read delay. */
static int account(Conn *c, long long k, int first, long long t, long long prev, int stamped) {
    int partial = c->sse && c->pending.len > 0;
    long long bound = 0;
    if (k > 1 || partial || !stamped) { /* without the kernel's stamp, t is select()'s: each chunk late */
        long long floor = prev;
        if ((c->clock && c->clock != Py_None)) {
            PyObject *v = PyObject_GetAttr(c->clock, str_floor_ns);
            long long f = v ? PyLong_AsLongLong(v) : -1;
            Py_XDECREF(v);
            if (f == -1 && PyErr_Occurred())
                return -1;
            if (f > floor)
                floor = f;
        }
        bound = t > floor && floor > 0 ? t - floor : 0;
    }
    long long last = partial || !stamped ? bound : 0; /* the read's last chunk */
    long long one = k == 1 ? last : bound;        /* its first */
    long long span = first ? one : (c->prev_bound > one ? c->prev_bound : one);
    if (!c->warmup) {
        bound_hist[bound_bin(span)] += 1;
        bound_hist[bound_bin(bound)] += k - 1;
    }
    c->prev_bound = last;
    if (first)
        return set_ll(c->rec, str_read_delay_ns, one);
    return 0;
}

/* read(): the event loop's reader callback. One receive, kernel-stamped, then its bytes.
 * Failures go to notify, never out of this call. */
static PyObject *Conn_read(Conn *c, PyObject *Py_UNUSED(ignored)) {
    union { /* aligned for struct cmsghdr, as CMSG_FIRSTHDR's reads need */
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {rbuf, READ_SIZE};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (c->stamped) {
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
    }
    ssize_t r;
    do
        r = recvmsg(c->fd, &msg, MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            PyErr_SetFromErrno(PyExc_OSError);
            fail(c);
        }
        Py_RETURN_NONE;
    }
    if (r == 0) {
        if (c->rec && flush(c) < 0)
            fail(c);
        else if (notify(c, N_EOF) < 0)
            PyErr_WriteUnraisable(c->notify);
        Py_RETURN_NONE;
    }
    long long kernel = 0, now = mono_ns();
    if (c->stamped)
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS &&
                cm->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) { /* a whole stamp, not a cut one */
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                kernel = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
            }
    long long t;
    if (kernel) { /* the kernel's time is CLOCK_REALTIME: onto the monotonic clock */
        t = kernel - (real_ns() - mono_ns());
        if (t > now)
            t = now;
    } else {
        t = loop_time(c, now);
    }
    if (t < c->t_last) /* never before an earlier read's time */
        t = c->t_last;
    c->t = c->t_last = t;
    long long before = c->nchunks, prev = c->prev_recv;
    c->prev_recv = now;
    if (process(c, rbuf, r) < 0) {
        fail(c);
        Py_RETURN_NONE;
    }
    if (c->rec && c->nchunks > before) {
        if (!c->warmup)
            reads_by_stamp[kernel != 0] += 1;
        if (account(c, c->nchunks - before, before == 0, t, prev, kernel != 0) < 0)
            fail(c);
    }
    Py_RETURN_NONE;
}

/* feed(data, t): bytes as if read at t (tests). */
static PyObject *Conn_feed(Conn *c, PyObject *args) {
    const char *p;
    Py_ssize_t n;
    long long t;
    if (!PyArg_ParseTuple(args, "y#L", &p, &n, &t))
        return NULL;
    c->t = c->t_last = t;
    if (process(c, p, n) < 0) {
        fail(c);
    }
    Py_RETURN_NONE;
}

static PyObject *get_attr(PyObject *o, PyObject *name) {
    return PyObject_GetAttr(o, name);
}

/* begin(rec, slow, parse_block): a new response on this connection, for this record. */
static PyObject *Conn_begin(Conn *c, PyObject *args) {
    PyObject *rec, *slow, *parse_block;
    if (!PyArg_ParseTuple(args, "OOO", &rec, &slow, &parse_block))
        return NULL;
    conn_clear_rec(c);
    Py_CLEAR(c->error);
    c->rec = Py_NewRef(rec);
    c->slow = Py_NewRef(slow);
    c->parse_block = Py_NewRef(parse_block);
    if (!(c->t_arr = get_attr(rec, str_chunk_t_ns)) || !(c->u_arr = get_attr(rec, str_chunk_usage)) ||
        !(c->c_arr = get_attr(rec, str_chunk_chars)))
        return NULL;
    PyObject *text = get_attr(rec, str_chunk_text), *ids = text ? get_attr(rec, str_token_ids) : NULL;
    if (!ids) {
        Py_XDECREF(text);
        return NULL;
    }
    c->python_only = text != Py_None || ids != Py_None;
    Py_DECREF(text);
    Py_DECREF(ids);
    PyObject *warm = get_attr(rec, str_warmup);
    if (!warm)
        return NULL;
    c->warmup = PyObject_IsTrue(warm);
    Py_DECREF(warm);
    c->nchunks = c->prev_bound = 0;
    if (resync(c) < 0)
        return NULL;
    c->state = S_HEAD;
    c->head.len = c->body.len = c->pending.len = 0;
    c->leftover = c->nloc = c->usage_dirty = 0;
    c->sse = 0;
    c->t_head = 0;
    Py_RETURN_NONE;
}

/* begin_body(mode, length, sse): the head was read; how its body comes. mode 0: no body. */
static PyObject *Conn_begin_body(Conn *c, PyObject *args) {
    int mode, sse;
    long long length;
    if (!PyArg_ParseTuple(args, "iLp", &mode, &length, &sse))
        return NULL;
    if (mode == B_LENGTH && length < 0) /* never reaches the framing below as a "length" */
        return PyErr_Format(PyExc_ValueError, "begin_body: a negative length %lld", length);
    c->sse = sse;
    c->mode = mode;
    c->cstate = C_SIZE;
    c->ndigits = 0;
    c->remaining = mode == B_LENGTH ? length : 0;
    c->state = (mode == 0 || (mode == B_LENGTH && length == 0)) ? S_DONE : S_BODY;
    Py_RETURN_NONE;
}

/* expect_head(): the head just read was a 1xx response; the real one follows. */
static PyObject *Conn_expect_head(Conn *c, PyObject *Py_UNUSED(ignored)) {
    c->state = S_HEAD;
    c->head.len = 0;
    Py_RETURN_NONE;
}

/* finish(): the body ends here (a close-delimited body at EOF): the last events flushed. */
static PyObject *Conn_finish(Conn *c, PyObject *Py_UNUSED(ignored)) {
    if (c->rec && flush(c) < 0)
        return NULL;
    c->state = S_DONE;
    Py_RETURN_NONE;
}

/* close(): the connection is over: every reference dropped (its owner's callback too). */
static PyObject *Conn_close(Conn *c, PyObject *Py_UNUSED(ignored)) {
    Conn_clear(c);
    c->state = S_DONE;
    Py_RETURN_NONE;
}

/* release(): the record let go (the request ended); the connection may serve another. */
static PyObject *Conn_release(Conn *c, PyObject *Py_UNUSED(ignored)) {
    conn_clear_rec(c);
    Py_CLEAR(c->error);
    c->state = S_IDLE;
    Py_RETURN_NONE;
}

static PyObject *Conn_head(Conn *c, void *Py_UNUSED(closure)) {
    return PyBytes_FromStringAndSize(c->head.p ? c->head.p : "", c->head.len);
}

static PyObject *Conn_body(Conn *c, void *Py_UNUSED(closure)) {
    return PyBytes_FromStringAndSize(c->body.p ? c->body.p : "", c->body.len);
}

static PyObject *Conn_rest(Conn *c, void *Py_UNUSED(closure)) {
    /* an event stream's unterminated last event, at the end of the stream */
    return PyBytes_FromStringAndSize(c->pending.p ? c->pending.p : "", c->pending.len);
}

static PyObject *Conn_error(Conn *c, void *Py_UNUSED(closure)) {
    return Py_NewRef(c->error ? c->error : Py_None);
}

static PyObject *Conn_in_body(Conn *c, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(c->state == S_BODY);
}

static PyMethodDef Conn_methods[] = {
    {"read", (PyCFunction)Conn_read, METH_NOARGS, "The reader callback: one kernel-stamped receive, processed."},
    {"feed", (PyCFunction)Conn_feed, METH_VARARGS, "feed(data, t): bytes as if read at t."},
    {"begin", (PyCFunction)Conn_begin, METH_VARARGS, "begin(rec, slow, parse_block): a new response."},
    {"begin_body", (PyCFunction)Conn_begin_body, METH_VARARGS, "begin_body(mode, length, sse)."},
    {"expect_head", (PyCFunction)Conn_expect_head, METH_NOARGS, "A 1xx head was read: the next head follows."},
    {"finish", (PyCFunction)Conn_finish, METH_NOARGS, "The body ends here (EOF of a close-delimited body)."},
    {"release", (PyCFunction)Conn_release, METH_NOARGS, "Let go of the record."},
    {"close", (PyCFunction)Conn_close, METH_NOARGS, "The connection is over: drop every reference."},
    {NULL},
};

static PyMemberDef Conn_members[] = {
    {"fd", T_INT, offsetof(Conn, fd), READONLY, "the socket"},
    {"stamped", T_INT, offsetof(Conn, stamped), READONLY, "the kernel stamps this socket's reads"},
    {"t_head", T_LONGLONG, offsetof(Conn, t_head), READONLY, "when the head's last bytes arrived"},
    {"t_last", T_LONGLONG, offsetof(Conn, t_last), READONLY, "when the last read's bytes arrived"},
    {"leftover", T_INT, offsetof(Conn, leftover), READONLY, "bytes came after the response"},
    {NULL},
};

static PyGetSetDef Conn_getset[] = {
    {"head", (getter)Conn_head, NULL, "the response head", NULL},
    {"body", (getter)Conn_body, NULL, "a body that is not an event stream (up to 64 KiB)", NULL},
    {"rest", (getter)Conn_rest, NULL, "bytes of an event not yet ended", NULL},
    {"error", (getter)Conn_error, NULL, "what ended the response", NULL},
    {"in_body", (getter)Conn_in_body, NULL, "the body is being read", NULL},
    {NULL},
};

static PyTypeObject ConnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loadgen.client._hotpath.Conn",
    .tp_basicsize = sizeof(Conn),
    .tp_dealloc = (destructor)Conn_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Conn_traverse,
    .tp_clear = (inquiry)Conn_clear,
    .tp_doc = "One HTTP/1.1 connection's reads: kernel-stamped, decoded and counted in C.",
    .tp_methods = Conn_methods,
    .tp_members = Conn_members,
    .tp_getset = Conn_getset,
    .tp_init = (initproc)Conn_init,
    .tp_new = PyType_GenericNew,
};

/* bounds(reset=False): [(bin's top in ns, chunks)]: per measured chunk, how far off the gap ending
 * at it (the TTFT, for a first chunk) can be, over every chunk this process read on this path
 * since the last reset. */
static PyObject *bounds(PyObject *Py_UNUSED(m), PyObject *args) {
    int reset = 0;
    if (!PyArg_ParseTuple(args, "|p", &reset))
        return NULL;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (int b = 0; b < BOUND_BINS; b++)
        if (bound_hist[b]) {
            PyObject *pair = Py_BuildValue("(LL)", bin_top(b), bound_hist[b]);
            if (!pair || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(pair);
        }
    if (reset)
        memset(bound_hist, 0, sizeof bound_hist);
    return out;
}

static PyObject *stamps(PyObject *Py_UNUSED(m), PyObject *args) {
    int reset = 0;
    if (!PyArg_ParseTuple(args, "|p", &reset))
        return NULL;
    PyObject *out = Py_BuildValue("(LL)", reads_by_stamp[1], reads_by_stamp[0]);
    if (out && reset)
        reads_by_stamp[0] = reads_by_stamp[1] = 0;
    return out;
}

static PyObject *set_marks(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "set_marks takes a sequence of bytes");
    if (!fast)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(fast);
    if (k > MAX_MARKS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "at most %d marks", MAX_MARKS);
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, i);
        char *data;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(b, &data, &len) < 0 || len < 1 || len > MAX_MARK_LEN) {
            Py_DECREF(fast);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "a mark is 1 to %d bytes", MAX_MARK_LEN);
            return NULL;
        }
        memcpy(marks[i], data, len);
        mark_len[i] = (size_t)len;
    }
    n_marks = (int)k;
    Py_DECREF(fast);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_marks", set_marks, METH_VARARGS,
     "set_marks(marks): byte strings whose presence sends an event to the Python reader (per-request SD keys)."},
    {"stamps", stamps, METH_VARARGS,
     "stamps(reset=False): (reads timed by the kernel's stamp, reads timed at select()), of reads with chunks."},
    {"bounds", bounds, METH_VARARGS, "bounds(reset=False): [(bin top ns, chunks)]: how far off each chunk's gap can be."},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", "loadgen's compiled read path.", -1,
                                     module_methods, NULL, NULL, NULL, NULL};

#define INTERN(var, s)                                                                                                 \
    if (!(var = PyUnicode_InternFromString(s)))                                                                        \
        return NULL;

PyMODINIT_FUNC PyInit__hotpath(void) {
    INTERN(str_frombytes, "frombytes");
    INTERN(str_usage_completion_tokens, "usage_completion_tokens");
    INTERN(str_prompt_tokens, "prompt_tokens");
    INTERN(str_finish_reason, "finish_reason");
    INTERN(str_read_delay_ns, "read_delay_ns");
    INTERN(str_chunk_usage, "chunk_usage");
    INTERN(str_chunk_phase, "chunk_phase");
    INTERN(str_chunk_t_ns, "chunk_t_ns");
    INTERN(str_chunk_chars, "chunk_chars");
    INTERN(str_chunk_text, "chunk_text");
    INTERN(str_token_ids, "token_ids");
    INTERN(str_done, "done");
    INTERN(str_warmup, "warmup");
    INTERN(str_returned_ns, "returned_ns");
    INTERN(str_floor_ns, "floor_ns");
    if (PyType_Ready(&ConnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    FramingError = PyErr_NewExceptionWithDoc("loadgen.client._hotpath.FramingError",
                                             "The response's HTTP framing is broken.", PyExc_ValueError, NULL);
    EventTooLarge = PyErr_NewExceptionWithDoc("loadgen.client._hotpath.EventTooLarge",
                                              "An SSE event outgrew the bound on one event.", PyExc_ValueError, NULL);
    if (!FramingError || !EventTooLarge || PyModule_AddObjectRef(m, "FramingError", FramingError) < 0 ||
        PyModule_AddObjectRef(m, "EventTooLarge", EventTooLarge) < 0 ||
        PyModule_AddIntConstant(m, "MAX_EVENT", MAX_EVENT) < 0 ||
        PyModule_AddObjectRef(m, "Conn", (PyObject *)&ConnType) < 0 || PyModule_AddIntConstant(m, "HEAD", N_HEAD) ||
        PyModule_AddIntConstant(m, "DONE", N_DONE) || PyModule_AddIntConstant(m, "EOF", N_EOF) ||
        PyModule_AddIntConstant(m, "ERROR", N_ERROR) || PyModule_AddIntConstant(m, "CHUNKED", B_CHUNKED) ||
        PyModule_AddIntConstant(m, "LENGTH", B_LENGTH) || PyModule_AddIntConstant(m, "CLOSE", B_CLOSE)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
