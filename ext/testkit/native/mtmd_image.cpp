// The test kit's window on the pinned llama.cpp's image path, for tests/vision.rs:
// stb_image as mtmd-helper loads an image (stbi_load_from_memory, 3 channels), and
// tools/mtmd/mtmd-image.cpp's preprocessors run on hyper-parameters the test sets,
// through the two clip functions they call. Compiled by build.rs from the pinned
// package's sources; never linked into the gem.

#include "mtmd-image.h"

#define STB_IMAGE_IMPLEMENTATION
#include "stb/stb_image.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

// clip.cpp's logger, quiet.
static void quiet_log(enum ggml_log_level, const char *, void *) {}
struct clip_logger_state g_logger_state = {quiet_log, nullptr};

// Per thread: tests preprocessing at once must not see each other's parameters.
static thread_local clip_hparams g_hparams;

const clip_hparams * clip_get_hparams(const struct clip_ctx *) { return &g_hparams; }
projector_type clip_get_projector_type(const struct clip_ctx *) { return PROJECTOR_TYPE_UNKNOWN; }

extern "C" {

struct elelem_mtmd_params {
    int32_t image_size, patch_size, n_merge, longest_edge, min_pixels, max_pixels;
    int32_t resize_algo, pad, resize_algo_rf, resize_algo_ov, pad_rf, pad_ov;
    uint8_t pad_color[3], pad_color_rf[3], pad_color_ov[3];
    float mean[3], std[3];
    int32_t n_candidates;
    const int32_t * candidates; // width, height pairs
};

struct elelem_mtmd_out {
    mtmd_image_preproc_out out;
    std::string error;
};

uint8_t * elelem_stbi_load(const uint8_t * buf, size_t len, int * nx, int * ny) {
    int nc = 0;
    return stbi_load_from_memory(buf, (int) len, nx, ny, &nc, 3);
}

void elelem_stbi_free(uint8_t * data) { stbi_image_free(data); }

// kind: 0 fixed size, 1 dyn size, 2 longest edge, 3 llava-uhd, 4 idefics3, 5 lfm2.
elelem_mtmd_out * elelem_mtmd_preprocess(int kind, const elelem_mtmd_params * p, const uint8_t * rgb, int nx, int ny) {
    auto * res = new elelem_mtmd_out();
    clip_hparams h;
    h.image_size = p->image_size;
    h.patch_size = p->patch_size;
    h.n_merge = p->n_merge;
    h.image_longest_edge = p->longest_edge;
    h.image_min_pixels = p->min_pixels;
    h.image_max_pixels = p->max_pixels;
    h.image_resize_algo = (resize_algo) p->resize_algo;
    h.image_resize_pad = (pad_style) p->pad;
    h.image_resize_algo_rf = (resize_algo) p->resize_algo_rf;
    h.image_resize_algo_ov = (resize_algo) p->resize_algo_ov;
    h.image_pad_rf = (pad_style) p->pad_rf;
    h.image_pad_ov = (pad_style) p->pad_ov;
    for (int i = 0; i < 3; i++) {
        h.image_pad_color[i] = p->pad_color[i];
        h.image_pad_color_rf[i] = p->pad_color_rf[i];
        h.image_pad_color_ov[i] = p->pad_color_ov[i];
        h.image_mean[i] = p->mean[i];
        h.image_std[i] = p->std[i];
    }
    for (int i = 0; i < p->n_candidates; i++) {
        h.image_res_candidates.push_back({p->candidates[2 * i], p->candidates[2 * i + 1]});
    }
    g_hparams = h;

    clip_image_u8 img;
    img.set_size({nx, ny}, false);
    std::vector<uint8_t> buf(rgb, rgb + (size_t) nx * ny * 3);
    img.cpy_buf(buf);
    try {
        switch (kind) {
            case 0: res->out = mtmd_image_preprocessor_fixed_size(nullptr).preprocess(img); break;
            case 1: res->out = mtmd_image_preprocessor_dyn_size(nullptr).preprocess(img); break;
            case 2: res->out = mtmd_image_preprocessor_longest_edge(nullptr).preprocess(img); break;
            case 3: res->out = mtmd_image_preprocessor_llava_uhd(nullptr).preprocess(img); break;
            case 4: res->out = mtmd_image_preprocessor_idefics3(nullptr).preprocess(img); break;
            case 5: res->out = mtmd_image_preprocessor_lfm2(nullptr).preprocess(img); break;
            default: res->error = "unknown preprocessor"; break;
        }
    } catch (const std::exception & e) {
        res->error = e.what();
    }
    return res;
}

const char * elelem_mtmd_error(const elelem_mtmd_out * r) { return r->error.empty() ? nullptr : r->error.c_str(); }
int elelem_mtmd_entries(const elelem_mtmd_out * r) { return (int) r->out.entries.size(); }
int elelem_mtmd_grid_x(const elelem_mtmd_out * r) { return r->out.grid_x; }
int elelem_mtmd_grid_y(const elelem_mtmd_out * r) { return r->out.grid_y; }

// Entry i, or the overview for i = -1 (nx = ny = 0 when there is none).
const float * elelem_mtmd_image(const elelem_mtmd_out * r, int i, int * nx, int * ny) {
    const clip_image_f32 & img = i < 0 ? r->out.overview : r->out.entries[i];
    *nx = img.nx();
    *ny = img.ny();
    if (img.is_placeholder()) {
        return nullptr;
    }
    return img.get_ro_buf().data();
}

void elelem_mtmd_free(elelem_mtmd_out * r) { delete r; }

}
