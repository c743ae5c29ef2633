// stb_image's JPEG decoder, from the pinned llama.cpp package (vendor/ggml/stb), for
// elelem's image input: JPEG leaves the IDCT's last bits and the chroma upsampling to the
// decoder, and llama.cpp's mtmd-helper decodes with stb_image, so elelem takes its JPEG
// pixels from the same code (other formats are lossless: elelem decodes them in Rust).
// Static, behind elelem_ names: a program may link its own stb_image. Callers check the
// header's size first; STBI_MAX_DIMENSIONS bounds it here too.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_MAX_DIMENSIONS 16384
#include "stb_image.h"

// RGB8, as mtmd-helper asks (3 channels), or NULL with elelem_stb_failure() saying why.
unsigned char * elelem_stb_jpeg(const unsigned char * bytes, int len, int * width, int * height) {
    int channels;
    return stbi_load_from_memory(bytes, len, width, height, &channels, 3);
}

const char * elelem_stb_failure(void) { return stbi_failure_reason(); }

void elelem_stb_free(void * pixels) { stbi_image_free(pixels); }
