/* The per-word and per-segment loops of kohaku/text/pdfium_page.py in C.
 *
 * Each function does what its Python twin in pdfium_page.py does, call for call and operation
 * for operation (the same PDFium calls in the same order, the same double arithmetic in the
 * same order), so the two give bit-identical figures; tests/test_pdfium_native.py compares
 * them page by page. PDFium's functions come in as pointers taken from the library pypdfium2
 * has loaded, so this file needs neither PDFium's headers nor Python's. kohaku/text/native.py
 * builds it with the system C compiler (-ffp-contract=off: no fused multiply-add, which would
 * round differently from Python); without a compiler the Python loops run instead.
 */
#include <stddef.h>
#include <stdlib.h>

typedef struct { float left, top, right, bottom; } rectf;     /* FS_RECTF */
typedef struct { float a, b, c, d, e, f; } matrixf;            /* FS_MATRIX */

typedef void *(*text_obj_fn)(void *textpage, int index);
typedef int (*char_box_fn)(void *textpage, int index, rectf *box);
typedef int (*char_origin_fn)(void *textpage, int index, double *x, double *y);
typedef double (*font_size_fn)(void *textpage, int index);
typedef int (*char_matrix_fn)(void *textpage, int index, matrixf *matrix);
typedef void *(*obj_font_fn)(void *text_object);

/* The two ends of each word (PdfiumPage.word_items): for word k, characters first[k] and
 * last[k] (end j = 2k and 2k+1): their text objects (objs[j]), loose boxes (boxes[8k..8k+3]
 * for the first, [8k+4..8k+7] for the last: left, top, right, bottom), the first's origin x
 * (origins[k]), and what pdfium_page._object_font reads of each end: the font size
 * (sizes[j]), the character's matrix a, b, c, d (matrices[4j..4j+3]; has_matrix[j] 0 where
 * PDFium has none) and the object's font (fonts[j]). A failed box or origin call leaves the
 * previous character's figures, as the Python loop's reused buffers do. */
void kohaku_word_ends(void *textpage, int n, const int *first, const int *last,
                      text_obj_fn get_obj, char_box_fn get_box, char_origin_fn get_origin,
                      font_size_fn get_size, char_matrix_fn get_matrix, obj_font_fn get_font,
                      void **objs, float *boxes, double *origins, double *sizes, float *matrices,
                      int *has_matrix, void **fonts)
{
    rectf r = {0, 0, 0, 0};
    double ox = 0.0, oy = 0.0;
    for (int k = 0; k < n; k++) {
        int a = first[k], b = last[k];
        objs[2 * k] = get_obj(textpage, a);
        get_box(textpage, a, &r);
        boxes[8 * k] = r.left;
        boxes[8 * k + 1] = r.top;
        boxes[8 * k + 2] = r.right;
        boxes[8 * k + 3] = r.bottom;
        get_origin(textpage, a, &ox, &oy);
        origins[k] = ox;
        if (b != a) {
            objs[2 * k + 1] = get_obj(textpage, b);
            get_box(textpage, b, &r);
        } else {
            objs[2 * k + 1] = objs[2 * k];
        }
        boxes[8 * k + 4] = r.left;
        boxes[8 * k + 5] = r.top;
        boxes[8 * k + 6] = r.right;
        boxes[8 * k + 7] = r.bottom;
        for (int e = 0; e < 2; e++) {
            int j = 2 * k + e, i = e ? b : a;
            matrixf m = {1, 0, 0, 1, 0, 0};
            sizes[j] = get_size(textpage, i);
            has_matrix[j] = get_matrix(textpage, i, &m) ? 1 : 0;
            matrices[4 * j] = m.a;
            matrices[4 * j + 1] = m.b;
            matrices[4 * j + 2] = m.c;
            matrices[4 * j + 3] = m.d;
            fonts[j] = objs[j] ? get_font(objs[j]) : NULL;
        }
    }
}

typedef int (*count_fn)(void *);
typedef void *(*page_obj_fn)(void *page, int index);
typedef void *(*form_obj_fn)(void *form, unsigned long index);
typedef int (*obj_type_fn)(void *obj);
typedef int (*obj_matrix_fn)(void *obj, matrixf *matrix);

/* m = inner then outer (PDF row-vector convention), as pdfium_page._compose */
static void compose(const double *in, const double *out, double *m)
{
    double a = in[0], b = in[1], c = in[2], d = in[3], e = in[4], f = in[5];
    double A = out[0], B = out[1], C = out[2], D = out[3], E = out[4], F = out[5];
    m[0] = a * A + b * C;
    m[1] = a * B + b * D;
    m[2] = c * A + d * C;
    m[3] = c * B + d * D;
    m[4] = e * A + f * C + E;
    m[5] = e * B + f * D + F;
}

static void object_matrix(obj_matrix_fn get_matrix, void *obj, double *m)
{
    matrixf f;
    if (!get_matrix(obj, &f)) {
        m[0] = 1.0; m[1] = 0.0; m[2] = 0.0; m[3] = 1.0; m[4] = 0.0; m[5] = 0.0;
        return;
    }
    m[0] = f.a; m[1] = f.b; m[2] = f.c; m[3] = f.d; m[4] = f.e; m[5] = f.f;
}

#define MAX_DEPTH 8

struct level { void *parent; int count; int depth; double m[6]; };

/* The page's image and path objects, those inside form XObjects included, in the order of
 * PdfiumPage._objects (a stack of forms, each read after the level that holds it): kinds[i],
 * objs[i] and the matrix to page space (matrices[6i..6i+5]). Returns how many there are;
 * when more than capacity, only the first capacity are written (call again with room for the
 * count returned). -1 when memory for the stack of forms runs out. */
int kohaku_page_objects(void *page, int image_kind, int path_kind, int form_kind,
                        count_fn page_count, page_obj_fn page_obj, count_fn form_count,
                        form_obj_fn form_obj, obj_type_fn obj_type, obj_matrix_fn obj_matrix,
                        int capacity, int *kinds, void **objs, double *matrices)
{
    int room = 64, top = 0, n = 0;
    struct level *stack = malloc(room * sizeof *stack);
    if (stack == NULL) return -1;
    stack[0].parent = NULL;
    stack[0].count = page_count(page);
    stack[0].depth = 0;
    stack[0].m[0] = 1.0; stack[0].m[1] = 0.0; stack[0].m[2] = 0.0;
    stack[0].m[3] = 1.0; stack[0].m[4] = 0.0; stack[0].m[5] = 0.0;
    top = 1;
    while (top > 0) {
        struct level cur = stack[--top];
        for (int k = 0; k < cur.count; k++) {
            void *obj = cur.parent == NULL ? page_obj(page, k) : form_obj(cur.parent, (unsigned long)k);
            int kind = obj_type(obj);
            if (kind == image_kind || kind == path_kind) {
                if (n < capacity) {
                    kinds[n] = kind;
                    objs[n] = obj;
                    for (int j = 0; j < 6; j++) matrices[6 * n + j] = cur.m[j];
                }
                n++;
            } else if (kind == form_kind && cur.depth < MAX_DEPTH) {
                double inner[6];
                if (top == room) {
                    struct level *more = realloc(stack, 2 * room * sizeof *stack);
                    if (more == NULL) { free(stack); return -1; }
                    stack = more;
                    room *= 2;
                }
                object_matrix(obj_matrix, obj, inner);
                stack[top].parent = obj;
                stack[top].count = form_count(obj);
                stack[top].depth = cur.depth + 1;
                compose(inner, cur.m, stack[top].m);
                top++;
            }
        }
    }
    free(stack);
    return n;
}

typedef void *(*segment_fn)(void *path, int index);
typedef int (*seg_point_fn)(void *segment, float *x, float *y);
typedef int (*seg_int_fn)(void *segment);

static double fabs_(double v) { return v < 0 ? -v : v; }

/* pdfium_page._add_edge: an axis-aligned segment as an edge (x0, top, x1, bottom, 'h'/'v') */
static int add_edge(double x0, double y0, double x1, double y1, int n, int capacity,
                    double *edges, char *orient)
{
    if (fabs_(x0 - x1) < 1e-6 && fabs_(y0 - y1) >= 1e-6) {
        if (n < capacity) {
            edges[4 * n] = x0;
            edges[4 * n + 1] = y1 < y0 ? y1 : y0;   /* Python's min(y0, y1): y0 on a tie */
            edges[4 * n + 2] = x0;
            edges[4 * n + 3] = y1 > y0 ? y1 : y0;   /* max(y0, y1) */
            orient[n] = 'v';
        }
        return n + 1;
    }
    if (fabs_(y0 - y1) < 1e-6 && fabs_(x0 - x1) >= 1e-6) {
        if (n < capacity) {
            edges[4 * n] = x1 < x0 ? x1 : x0;
            edges[4 * n + 1] = y0;
            edges[4 * n + 2] = x1 > x0 ? x1 : x0;
            edges[4 * n + 3] = y0;
            orient[n] = 'h';
        }
        return n + 1;
    }
    return n;
}

/* PdfiumPage.edges: every axis-aligned segment of every path object (objs[i] with the matrix
 * of its form, outer[6i..6i+5]), in page coordinates (origin top-left: left and top of the
 * page box). Returns the number of edges; only the first capacity are written. */
int kohaku_path_edges(int n_objs, void **objs, const double *outer, double left, double top,
                      obj_matrix_fn obj_matrix, count_fn seg_count, segment_fn segment,
                      seg_point_fn seg_point, seg_int_fn seg_type, seg_int_fn seg_close,
                      int moveto, int capacity, double *edges, char *orient)
{
    int n = 0;
    float fx = 0.0f, fy = 0.0f;
    for (int i = 0; i < n_objs; i++) {
        double inner[6], m[6];
        object_matrix(obj_matrix, objs[i], inner);
        compose(inner, outer + 6 * i, m);
        int have_prev = 0, have_start = 0;
        double px = 0, py = 0, sx = 0, sy = 0;
        int count = seg_count(objs[i]);
        for (int k = 0; k < count; k++) {
            void *seg = segment(objs[i], k);
            seg_point(seg, &fx, &fy);
            double x = fx, y = fy;
            double qx = m[0] * x + m[2] * y + m[4] - left;
            double qy = top - (m[1] * x + m[3] * y + m[5]);
            if (seg_type(seg) == moveto) {
                sx = qx; sy = qy; have_start = 1;
            } else if (have_prev) {
                n = add_edge(px, py, qx, qy, n, capacity, edges, orient);
            }
            px = qx; py = qy; have_prev = 1;
            if (seg_close(seg) && have_start)
                n = add_edge(qx, qy, sx, sy, n, capacity, edges, orient);
        }
    }
    return n;
}
