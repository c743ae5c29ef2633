// The reference driver: llama.cpp (built from the pinned package with its
// defaults) answering the questions our goldens and benchmarks ask.
//
// Every command takes any number of `-o KEY=true|false` options, anywhere on
// the line, which override boolean metadata the way llama.cpp's --override-kv
// does: tokenizer_goldens.rb reaches with them tokenizer paths that our
// models do not take as shipped. And `-fa on|off|auto`, as llama.cpp's tools
// take it: the flash attention of every context made (default auto, which
// the CPU backend resolves to on). And `-ctk TYPE` / `-ctv TYPE` (f16, q8_0,
// q4_0, ...), as llama.cpp's `--cache-type-k` / `--cache-type-v`: the types of
// the KV cache of every context made (default f16). And `--rpc HOST:PORT,...` and
// `-ngl N`, as llama.cpp's tools take them: every model loaded is spread over those RPC
// workers' devices (llama.cpp's default split, by their free memory), N layers of it
// (the output one counted; default all); `-nkvo`: their KV caches in the CPU's memory
// (llama.cpp's --no-kv-offload); `-sm none -mg N`: every layer on device N (--split-mode, --main-gpu).
// Without --rpc, `-ngl` and the others apply to llama.cpp's default devices: in a build with
// GGML_VULKAN (tasks/reference.rb's Vulkan build), the Vulkan GPUs, lavapipe among them when
// GGML_VK_VISIBLE_DEVICES names it.
//
//   elelem-reference generate MODEL IDS N_PREDICT [N_CTX] [N_THREADS] [IGNORE_EOS]
//       IDS is comma-separated prompt token ids. Prints the greedy ids (one
//       line, space-separated), then the hex of their text (token_to_piece,
//       special=false, as llama-completion prints them), then, one per step,
//       the margin of the greedy choice over the runner-up logit.
//   elelem-reference lockstep MODEL N_PREDICT N_CTX N_THREADS IGNORE_EOS IDS...
//       Decodes each IDS (comma-separated prompt ids) as sequence 0, 1, ... of
//       one context (unified KV cache, n_seq_max = their number), one
//       llama_batch per pass laid out as elelem's batcher lays it out: the next
//       token of every running sequence in sequence order, then prompt chunks
//       in sequence order, at most n_ubatch (512) tokens in all; only the last
//       token of a prompt and the decoded tokens are outputs. Greedy; a
//       sequence stops at N_PREDICT tokens, at EOG (unless IGNORE_EOS) or when
//       it fills N_CTX. Prints one line of ids per sequence, and on stderr
//       "elapsed_s <seconds>" from the first pass to the last.
//   elelem-reference continue MODEL N_PREDICT N_CTX N_THREADS IGNORE_EOS IDS MORE_IDS
//       A conversation continued from the cache, as a prompt cache continues it
//       (llama-server's cache_prompt): generate's greedy decoding of IDS, then,
//       in the same context, the next prompt IDS + those ids + MORE_IDS, of which
//       only what the cache lacks is decoded (the last id generated, never
//       evaluated, and MORE_IDS, in one llama_batch_get_one), then greedy
//       decoding again. Prints one line of ids per turn.
//   elelem-reference tokenize MODEL FILE [ADD_SPECIAL] [PARSE_SPECIAL]
//       FILE holds one hex-encoded UTF-8 string per line; prints one line of
//       token ids per input line.
//   elelem-reference detokenize MODEL FILE
//       FILE holds one line of space-separated token ids per case; prints one
//       line per case: hex(detokenize special=0) hex(detokenize special=1),
//       each as common_detokenize does it (remove_special = false).
//   elelem-reference vocab MODEL
//       Prints n_vocab, bos, eos, add_bos, add_eos, the EOG ids, and FNV-1a 64
//       digests of token_to_piece(id, lstrip 0, special) over blocks of 4096
//       ids: each id contributes its piece length (u32 LE), then its bytes.
//   elelem-reference roundtrip MODEL
//       The round trips of llama.cpp's tests/test-tokenizer-1-bpe.cpp (BPE
//       vocabularies) or test-tokenizer-1-spm.cpp (the others), run to the end
//       rather than to the first failure: every token's piece tokenized and
//       detokenized again, then every code point but surrogates and
//       U+40000..U+E0000. Prints "tokens N DIGEST" and "code_points N DIGEST":
//       how many differ and an FNV-1a 64 digest of their ids (u32 LE each).
//   elelem-reference chat MODEL FILE
//       FILE holds lines "role<TAB>hex(content)"; prints the hex of the prompt
//       rendered by llama_chat_apply_template with add_generation_prompt.
//   elelem-reference grammar MODEL IDS N_PREDICT GBNF_FILE [N_CTX [N_THREADS]]
//       As generate, greedy under llama.cpp's GBNF sampler
//       (llama_sampler_init_grammar with the file's grammar, start rule
//       "root", chained before greedy): prints the ids (the end-of-generation
//       token the grammar allows at its end included) and the hex of the text.
//       Prints "mask_us" and the microseconds each token's grammar step took
//       (the grammar's apply over the whole vocabulary, then its accept). On
//       stderr: "decode_s <s> tokens <n>", the seconds from the prompt's logits
//       to the last token (masks, sampling and decode passes).
//   elelem-reference embed MODEL FILE N_CTX N_THREADS POOLING NORMALIZE BATCH_TEXTS
//       What llama-embedding (examples/embedding/embedding.cpp) does, through
//       the library: FILE holds one text per line as comma-separated token ids
//       (special tokens included: for a BERT vocabulary [CLS] ... [SEP], as
//       common_tokenize(add_special=true) gives; a rerank pair is one line,
//       [CLS] query [SEP] doc [SEP] for a bert vocabulary whose add_eos is true
//       and add_sep false, which is what embedding.cpp's query + EOS text + doc
//       tokenizes to without a "rerank" chat template). POOLING is default (the
//       GGUF's), none, mean, cls, last or rank; NORMALIZE is --embd-normalize's
//       (-1 none, 0 max-abs to int16 range, 1 taxicab, 2 euclidean, >2 p-norm).
//       Texts are packed into one batch, each its own sequence, while the batch
//       holds at most n_batch tokens (max(N_CTX, 2048), or N_CTX for a causal
//       model, as llama-embedding's context has it) and fewer than BATCH_TEXTS
//       texts; the memory is cleared before each batch. Prints one line per text (per token with
//       pooling none) of the embedding's float32 bits, 8 hex digits each; for
//       rank, the n_cls_out raw scores, not normalized (llama-server's
//       /v1/rerank reads embd[0] as it is). On stderr: "seconds <s>" (the batch
//       loop, tokens already given) and "max_rss_kib <k>" (getrusage).
//   elelem-reference speculative TARGET DRAFT IDS N_PREDICT K [N_CTX [N_THREADS [IGNORE_EOS]]]
//       Greedy speculative decoding as llama-speculative-simple runs it with its
//       draft-simple drafter (examples/speculative-simple, common/speculative.cpp;
//       --spec-draft-n-max K, p_min 0, --temp 0), through the library: both models
//       evaluate the prompt but its last token; then each round the draft model
//       evaluates the last token and its greedy guesses one at a time (at most K, and
//       no more than N_PREDICT or the context leave room for), forgets them, and both
//       models evaluate [last, guesses...] in one batch (every row an output on the
//       target, the last only on the draft); the target's greedy choices are kept up
//       to the first that differs from a guess, and both caches forget the rest.
//       Prints the ids and the hex of their text as generate does; on stderr
//       "decode_s <s> tokens <n> drafted <n> accepted <n> passes <n>" (from the end
//       of the prompt's pass to the last token).
//   elelem-reference lookup MODEL IDS N_PREDICT K [N_CTX [N_THREADS [IGNORE_EOS]]]
//       Greedy prompt lookup as llama-lookup runs it (examples/lookup, the n-gram
//       cache of common/ngram-cache.cpp over the prompt and the accepted tokens, n-grams
//       of 1 to 4, --draft K): the prompt but its last token, then that token alone,
//       whose logits give the first token; then each round [last, draft...] in one
//       batch. K 0 is plain greedy decoding, one token a pass. The same output; on
//       stderr the same line, "tokens" counting those after the first (which came
//       with the prompt) and decode_s the time they took.
//   elelem-reference mtmd MODEL MMPROJ PROMPT_HEX_FILE N_PREDICT [N_CTX [N_THREADS [N_BATCH]]] IMAGE...
//       What llama-mtmd-cli does with a prompt and images, through libmtmd: the projector
//       MMPROJ loaded for MODEL (mtmd_context_params_default, on the CPU, N_THREADS, no
//       timings, no warmup), each IMAGE (or audio file: a WAV, for an audio projector) read by
//       mtmd_helper_bitmap_init_from_file, and
//       PROMPT_HEX_FILE's first line (the hex of the prompt's text, in which mtmd's marker
//       <__media__> stands for each image in turn) cut by mtmd_tokenize (add_special and
//       parse_special) into chunks, evaluated in order as mtmd_helper_eval_chunks does
//       (n_batch N_BATCH, by default the context's; the last chunk's last token an
//       output); then generate's greedy decoding of up to N_PREDICT tokens, stopping at
//       EOG. N_CTX (4096) and N_THREADS (2) are the context's, as for generate; the
//       optional numbers are read while the arguments are numbers. Prints a line per chunk,
//       in order: "chunk text <ids...>", "chunk image <n_tokens> <n_pos> <nx> <ny>" or
//       "chunk audio <n_tokens> <n_pos>" (one log-mel piece; an audio chunk is encoded and
//       decoded as an image chunk is, and counts as one below);
//       then "n_embd <n>" (the width of an image token's embedding), "n_past <n>" (the
//       positions the prompt took), "encode_ms <ms...>" (mtmd_encode_chunk's time for
//       each image chunk), then generate's three lines (the ids, the hex of their text,
//       the margins). With `--embd-out FILE` (anywhere on the line), the image chunks'
//       embeddings (mtmd_get_output_embd after each mtmd_encode_chunk) are written to
//       FILE one after the other, raw little-endian f32, n_tokens x n_embd each. On stderr,
//       "prompt_s <s> prompt_tokens <n> decode_s <s> tokens <n>": the seconds the prompt's
//       chunks took to evaluate but their encoding (text and image embeddings through the
//       model: n_past positions), and the greedy decoding's passes and their seconds.
//   elelem-reference serve MODEL N_THREADS N_CTX
//       Prints "load_ms <ms>" (model load and context creation), then answers
//       one line per line read, random token ids throughout:
//         "pp N"       -> "pp <t/s>": N tokens as one prompt of a fresh sequence
//         "tg N DEPTH" -> "tg <t/s>": N tokens decoded one at a time after DEPTH
//                         tokens of context, which the next "tg" keeps as far
//                         as it reaches (refilled for sliding-window models)
//
// Built with CPU variants (ELELEM_REFERENCE_VARIANTS: llama.cpp's release layout,
// GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS), the driver loads the CPU variant that
// ELELEM_CPU_VARIANT names (libggml-cpu-<name>.so beside it, and no other), as elelem's
// platform gem does; without it, the best one, as ggml_backend_load_all picks it.
//
// The context mirrors llama-completion's defaults: flash attention auto, F16
// KV cache, n_batch 2048, n_ubatch 512, swa_full false, the prompt fed with
// llama_batch_get_one (only the last token is an output), greedy sampling.
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"
#include "ngram-cache.h"  // header-only structures (the lookup mode)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

static std::string to_hex(const std::string & s) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) { out += digits[c >> 4]; out += digits[c & 15]; }
    return out;
}

static std::string from_hex(const std::string & h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) out += (char) std::stoi(h.substr(i, 2), nullptr, 16);
    return out;
}

static std::vector<llama_token> parse_ids(const char * s) {
    std::vector<llama_token> ids;
    std::string cur;
    for (const char * p = s;; ++p) {
        if (*p == ',' || *p == '\0') { if (!cur.empty()) ids.push_back(std::stoi(cur)); cur.clear(); if (!*p) break; }
        else cur += *p;
    }
    return ids;
}

static void quiet_log(ggml_log_level, const char *, void *) {}

// The directory this executable lies in (where a variants build puts the variants).
static std::string executable_dir() {
    std::vector<char> buf(4096);
    ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) return ".";
    std::string path(buf.data(), n);
    return path.substr(0, path.find_last_of('/'));
}

// ELELEM_CPU_VARIANT=<name>: only that CPU variant is loaded. Returns false (after
// saying why) when it cannot be, or when this build has no variants.
static bool load_cpu_variant() {
    const char * variant = getenv("ELELEM_CPU_VARIANT");
    if (!variant || !*variant) return true;
    if (ggml_backend_reg_count() > 0) {
        fprintf(stderr, "ELELEM_CPU_VARIANT=%s: this reference links its CPU backend in (build it with "
                        "-DELELEM_REFERENCE_VARIANTS=ON)\n", variant);
        return false;
    }
    std::string path = executable_dir() + "/libggml-cpu-" + variant + ".so";
    if (!ggml_backend_load(path.c_str())) {
        fprintf(stderr, "ELELEM_CPU_VARIANT=%s: cannot load %s\n", variant, path.c_str());
        return false;
    }
    return true;
}

// The -o overrides, ended by an empty key as llama.cpp expects; main fills it
// before any command runs, so that every model loaded sees them.
static std::vector<llama_model_kv_override> overrides;

// Parses one `-o KEY=true|false`; only booleans, as no metadata we override
// is anything else.
static bool add_override(const std::string & kv) {
    llama_model_kv_override o = {};
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq >= sizeof(o.key)) return false;
    std::string value = kv.substr(eq + 1);
    if (value != "true" && value != "false") return false;
    o.tag = LLAMA_KV_OVERRIDE_TYPE_BOOL;
    memcpy(o.key, kv.data(), eq);
    o.val_bool = value == "true";
    overrides.push_back(o);
    return true;
}

// -fa: the flash attention of every context the commands make.
static llama_flash_attn_type flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;

static bool set_flash_attn(const char * value) {
    if (!strcmp(value, "on")) flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (!strcmp(value, "off")) flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else if (!strcmp(value, "auto")) flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
    else return false;
    return true;
}

// -ctk / -ctv: the KV cache types of every context the commands make.
static ggml_type cache_type_k = GGML_TYPE_F16;
static ggml_type cache_type_v = GGML_TYPE_F16;

static bool set_cache_type(ggml_type & type, const char * value) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * name = ggml_type_name((ggml_type) t);
        if (name && !strcmp(name, value)) {
            type = (ggml_type) t;
            return true;
        }
    }
    return false;
}

// --rpc and -ngl: the RPC workers' devices (NULL-terminated; empty: none) and how many
// layers go to them (-1: all).
static std::vector<ggml_backend_dev_t> rpc_devices;
static int n_gpu_layers = -1;
static bool kv_offload = true;
static llama_split_mode split_mode = LLAMA_SPLIT_MODE_LAYER;
static int main_gpu = 0;

// Through the RPC backend's registry entry, as llama.cpp's common/arg.cpp does, so that a
// variants build (GGML_BACKEND_DL, where RPC is a module the driver does not load) links.
static bool add_rpc_servers(const char * list) {
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    if (!rpc) {
        fprintf(stderr, "--rpc: this build has no RPC backend\n");
        return false;
    }
    using add_server_t = ggml_backend_reg_t (*)(const char * endpoint);
    auto add_server = (add_server_t) ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server");
    if (!add_server) return false;
    std::stringstream ss(list);
    std::string endpoint;
    while (std::getline(ss, endpoint, ',')) {
        ggml_backend_reg_t reg = add_server(endpoint.c_str());
        if (!reg) return false;
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
            rpc_devices.push_back(ggml_backend_reg_dev_get(reg, i));
        }
    }
    return !rpc_devices.empty();
}

static bool set_split_mode(const char * value) {
    if (!strcmp(value, "none")) split_mode = LLAMA_SPLIT_MODE_NONE;
    else if (!strcmp(value, "layer")) split_mode = LLAMA_SPLIT_MODE_LAYER;
    else return false;
    return true;
}

// vocab_only skips the weights, for the commands that only ask the tokenizer.
static llama_model * load(const char * path, bool vocab_only) {
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = vocab_only;
    std::vector<ggml_backend_dev_t> devices = rpc_devices;
    if (!devices.empty()) {
        devices.push_back(nullptr);
        mp.devices = devices.data();
    }
    // Without --rpc, llama.cpp's own choice of devices: this machine's GPUs (in a build with
    // GGML_VULKAN, Vulkan's; none in the CPU build, where these change nothing).
    mp.n_gpu_layers = n_gpu_layers;
    mp.split_mode = split_mode;
    mp.main_gpu = main_gpu;
    mp.kv_overrides = overrides.data();
    llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", path); exit(1); }
    return model;
}

static llama_context * make_context(llama_model * model, int n_ctx, int n_threads) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.swa_full = false;  // common_params' default, as llama-completion runs
    cp.flash_attn_type = flash_attn;
    cp.type_k = cache_type_k;
    cp.type_v = cache_type_v;
    cp.offload_kqv = kv_offload;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); exit(1); }
    return ctx;
}

static void decode_prompt(llama_context * ctx, std::vector<llama_token> & ids, int n_batch) {
    for (size_t i = 0; i < ids.size(); i += n_batch) {
        int n = (int) std::min(ids.size() - i, (size_t) n_batch);
        if (llama_decode(ctx, llama_batch_get_one(ids.data() + i, n))) { fprintf(stderr, "decode failed\n"); exit(1); }
    }
}

// The llama.cpp calls below answer a negative length when the buffer is too
// small; we then retry with exactly that much room.
static std::string piece(const llama_vocab * vocab, llama_token id, bool special) {
    std::string buf(64, '\0');
    int n = llama_token_to_piece(vocab, id, &buf[0], (int) buf.size(), 0, special);
    if (n < 0) {
        buf.resize(-n);
        n = llama_token_to_piece(vocab, id, &buf[0], (int) buf.size(), 0, special);
    }
    buf.resize(n);
    return buf;
}

static std::string detokenize(const llama_vocab * vocab, const std::vector<llama_token> & ids, bool special) {
    std::string text(ids.size() * 16 + 16, '\0');
    int n = llama_detokenize(vocab, ids.data(), (int) ids.size(), &text[0], (int) text.size(), false, special);
    if (n < 0) {
        text.resize(-n);
        n = llama_detokenize(vocab, ids.data(), (int) ids.size(), &text[0], (int) text.size(), false, special);
    }
    text.resize(n);
    return text;
}

// How far the greedy choice is ahead of the runner-up: where it is small, a
// different rounding anywhere in the pass can change the token.
static float top_two_margin(const float * logits, int n) {
    float first = -INFINITY, second = -INFINITY;
    for (int i = 0; i < n; ++i) {
        if (logits[i] > first) { second = first; first = logits[i]; }
        else if (logits[i] > second) second = logits[i];
    }
    return first - second;
}

static int cmd_generate(int argc, char ** argv) {
    if (argc < 5) return 2;
    int n_predict = atoi(argv[4]);
    int n_ctx = argc > 5 ? atoi(argv[5]) : 4096;
    int n_threads = argc > 6 ? atoi(argv[6]) : 2;
    bool ignore_eos = argc > 7 && atoi(argv[7]) != 0;
    llama_model * model = load(argv[2], false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context * ctx = make_context(model, n_ctx, n_threads);
    llama_sampler * smpl = llama_sampler_init_greedy();
    std::vector<llama_token> prompt = parse_ids(argv[3]);
    decode_prompt(ctx, prompt, 2048);
    std::vector<llama_token> out;
    std::vector<float> margins;
    std::string text;
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n_predict; ++i) {
        margins.push_back(top_two_margin(llama_get_logits_ith(ctx, -1), n_vocab));
        llama_token id = llama_sampler_sample(smpl, ctx, -1);
        out.push_back(id);
        if (!ignore_eos && llama_vocab_is_eog(vocab, id)) break;
        text += piece(vocab, id, false);
        if ((int) (prompt.size() + out.size()) >= n_ctx) break;
        if (llama_decode(ctx, llama_batch_get_one(&id, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
    }
    for (size_t i = 0; i < out.size(); ++i) printf(i ? " %d" : "%d", out[i]);
    printf("\n%s\n", to_hex(text).c_str());
    for (size_t i = 0; i < margins.size(); ++i) printf(i ? " %.9g" : "%.9g", margins[i]);
    printf("\n");
    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int cmd_grammar(int argc, char ** argv) {
    if (argc < 6) return 2;
    int n_predict = atoi(argv[4]);
    int n_ctx = argc > 6 ? atoi(argv[6]) : 4096;
    int n_threads = argc > 7 ? atoi(argv[7]) : 2;
    std::ifstream in(argv[5]);
    std::stringstream gbnf;
    gbnf << in.rdbuf();
    llama_model * model = load(argv[2], false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context * ctx = make_context(model, n_ctx, n_threads);
    llama_sampler * grammar = llama_sampler_init_grammar(vocab, gbnf.str().c_str(), "root");
    if (!grammar) { fprintf(stderr, "the grammar does not parse\n"); return 1; }
    llama_sampler * greedy = llama_sampler_init_greedy();
    std::vector<llama_token> prompt = parse_ids(argv[3]);
    decode_prompt(ctx, prompt, 2048);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token_data> cur(n_vocab);
    std::vector<llama_token> out;
    std::vector<double> mask_us;
    std::string text;
    const auto decode_start = std::chrono::steady_clock::now();
    for (int i = 0; i < n_predict; ++i) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        for (int t = 0; t < n_vocab; ++t) cur[t] = llama_token_data{t, logits[t], 0.0f};
        llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
        auto start = std::chrono::steady_clock::now();
        llama_sampler_apply(grammar, &arr);
        auto applied = std::chrono::steady_clock::now();
        llama_sampler_apply(greedy, &arr);
        llama_token id = arr.data[arr.selected].id;
        auto accept = std::chrono::steady_clock::now();
        llama_sampler_accept(grammar, id);
        auto end = std::chrono::steady_clock::now();
        mask_us.push_back(std::chrono::duration<double, std::micro>((applied - start) + (end - accept)).count());
        out.push_back(id);
        if (llama_vocab_is_eog(vocab, id)) break;
        text += piece(vocab, id, false);
        if ((int) (prompt.size() + out.size()) >= n_ctx) break;
        if (llama_decode(ctx, llama_batch_get_one(&id, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
    }
    const double decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
    for (size_t i = 0; i < out.size(); ++i) printf(i ? " %d" : "%d", out[i]);
    printf("\n%s\nmask_us", to_hex(text).c_str());
    for (double us : mask_us) printf(" %.1f", us);
    printf("\n");
    fprintf(stderr, "decode_s %.6f tokens %zu\n", decode_s, out.size());
    llama_sampler_free(grammar);
    llama_sampler_free(greedy);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

// The index of the largest logit; the lowest wins a tie, as llama.cpp's greedy sampler.
static llama_token argmax(const float * logits, int n) {
    llama_token best = 0;
    for (int i = 1; i < n; ++i) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

// Sets `batch` to `ids` at positions pos0, pos0 + 1, ... of sequence 0; every token an
// output, or only the last.
static void fill_batch(llama_batch & batch, const std::vector<llama_token> & ids, int pos0, bool all_outputs) {
    batch.n_tokens = (int) ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
        batch.token[i] = ids[i];
        batch.pos[i] = pos0 + (int) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = all_outputs || i + 1 == ids.size();
    }
}

static void decode_or_die(llama_context * ctx, llama_batch & batch) {
    if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); exit(1); }
}

// The counts a speculative run reports, and the ids it made.
struct Speculated {
    std::vector<llama_token> out;
    int drafted = 0, accepted = 0, passes = 0;
    bool done = false;
};

// Keeps the target's greedy choices over a verification batch [last, draft...]: each
// row's choice, up to the first that differs from the draft (or the end of the
// generation). Returns how many it kept.
static int keep_agreed(Speculated & run, llama_context * ctx, const llama_vocab * vocab,
                       const std::vector<llama_token> & draft, int n_predict, bool ignore_eos,
                       int room, const std::function<void(llama_token)> & on_token) {
    const int n_vocab = llama_vocab_n_tokens(vocab);
    int taken = 0;
    for (size_t i = 0; i <= draft.size(); ++i) {
        const llama_token id = argmax(llama_get_logits_ith(ctx, (int) i), n_vocab);
        run.out.push_back(id);
        on_token(id);
        ++taken;
        const bool agreed = i < draft.size() && id == draft[i];
        run.accepted += agreed;
        if ((!ignore_eos && llama_vocab_is_eog(vocab, id)) || (int) run.out.size() >= n_predict ||
            (int) run.out.size() >= room) {
            run.done = true;
            break;
        }
        if (!agreed) break;
    }
    return taken;
}

static void print_speculated(const Speculated & run, const llama_vocab * vocab, bool ignore_eos, double decode_s,
                             size_t tokens) {
    std::string text;
    for (llama_token id : run.out) {
        if (ignore_eos || !llama_vocab_is_eog(vocab, id)) text += piece(vocab, id, false);
    }
    for (size_t i = 0; i < run.out.size(); ++i) printf(i ? " %d" : "%d", run.out[i]);
    printf("\n%s\n", to_hex(text).c_str());
    fprintf(stderr, "decode_s %.6f tokens %zu drafted %d accepted %d passes %d\n", decode_s, tokens, run.drafted,
            run.accepted, run.passes);
}

static int cmd_speculative(int argc, char ** argv) {
    if (argc < 7) return 2;
    const int n_predict = atoi(argv[5]), k = atoi(argv[6]);
    const int n_ctx = argc > 7 ? atoi(argv[7]) : 4096;
    const int n_threads = argc > 8 ? atoi(argv[8]) : 2;
    const bool ignore_eos = argc > 9 && atoi(argv[9]) != 0;
    llama_model * target = load(argv[2], false);
    llama_model * draft_model = load(argv[3], false);
    const llama_vocab * vocab = llama_model_get_vocab(target);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_vocab_draft = llama_vocab_n_tokens(llama_model_get_vocab(draft_model));
    llama_context * ctx = make_context(target, n_ctx, n_threads);
    llama_context * ctx_draft = make_context(draft_model, n_ctx, n_threads);
    std::vector<llama_token> prompt = parse_ids(argv[4]);
    if (prompt.empty() || n_predict < 1 || k < 0) return 2;
    std::vector<llama_token> head(prompt.begin(), prompt.end() - 1);
    if (!head.empty()) {
        decode_prompt(ctx, head, 2048);
        decode_prompt(ctx_draft, head, 2048);
    }
    llama_batch batch = llama_batch_init(std::max(k + 1, 1), 0, 1);
    llama_token last = prompt.back();
    int n_past = (int) head.size();
    Speculated run;
    const int room = n_ctx - (int) prompt.size();
    const auto start = std::chrono::steady_clock::now();
    while (!run.done) {
        const int n_draft = std::max(0, std::min({k, n_predict - (int) run.out.size() - 1, n_ctx - n_past - 2}));
        std::vector<llama_token> draft;
        if (n_draft > 0) {
            for (llama_token cur = last;;) {
                fill_batch(batch, {cur}, n_past + (int) draft.size(), true);
                decode_or_die(ctx_draft, batch);
                const llama_token guess = argmax(llama_get_logits_ith(ctx_draft, -1), n_vocab_draft);
                if (guess >= n_vocab) break;
                draft.push_back(guess);
                if ((int) draft.size() == n_draft) break;
                cur = guess;
            }
            llama_memory_seq_rm(llama_get_memory(ctx_draft), 0, n_past, -1);
        }
        std::vector<llama_token> verify = {last};
        verify.insert(verify.end(), draft.begin(), draft.end());
        fill_batch(batch, verify, n_past, true);
        decode_or_die(ctx, batch);
        fill_batch(batch, verify, n_past, false);
        decode_or_die(ctx_draft, batch);
        ++run.passes;
        run.drafted += (int) draft.size();
        const int taken = keep_agreed(run, ctx, vocab, draft, n_predict, ignore_eos, room, [](llama_token) {});
        n_past += taken;
        llama_memory_seq_rm(llama_get_memory(ctx), 0, n_past, -1);
        llama_memory_seq_rm(llama_get_memory(ctx_draft), 0, n_past, -1);
        last = run.out.back();
    }
    const double decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print_speculated(run, vocab, ignore_eos, decode_s, run.out.size());
    llama_batch_free(batch);
    llama_free(ctx_draft);
    llama_free(ctx);
    llama_model_free(draft_model);
    llama_model_free(target);
    return 0;
}

// common/ngram-cache.cpp's common_ngram_cache_update and common_ngram_cache_draft,
// copied without their logging: the driver links only libllama. The same
// std::unordered_map, so the same choice among followers seen equally often.
static void ngram_cache_update(common_ngram_cache & ngram_cache, int ngram_min, int ngram_max,
                               std::vector<llama_token> & inp, int nnew) {
    const int64_t inp_size = inp.size();
    for (int64_t ngram_size = ngram_min; ngram_size <= ngram_max; ++ngram_size) {
        const int64_t i_start = std::max(inp_size - nnew, ngram_size);
        for (int64_t i = i_start; i < inp_size; ++i) {
            const int64_t ngram_start = i - ngram_size;
            common_ngram ngram(&inp[ngram_start], ngram_size);
            const llama_token token = inp[i];
            common_ngram_cache::iterator part_it = ngram_cache.find(ngram);
            if (part_it == ngram_cache.end()) {
                common_ngram_cache_part part;
                part.emplace(token, 1);
                ngram_cache.emplace(ngram, part);
            } else {
                common_ngram_cache_part::iterator token_count_it = part_it->second.find(token);
                if (token_count_it == part_it->second.end()) {
                    part_it->second.emplace(token, 1);
                } else {
                    token_count_it->second++;
                }
            }
        }
    }
}

static llama_token ngram_get_token(const std::vector<llama_token> & inp, const std::vector<llama_token> & draft,
                                   const size_t i) {
    return i < inp.size() ? inp[i] : draft[1 + i - inp.size()];
}

constexpr int    draft_min_sample_size_lax[LLAMA_NGRAM_MAX] = { 2,  2,  1,  1};
constexpr int        draft_min_percent_lax[LLAMA_NGRAM_MAX] = {66, 50, 50, 50};

// try_draft for the primary cache; llama-lookup's dynamic and static caches are empty
// unless files are given, so only the context's is consulted (with no static counts).
static llama_token ngram_try_draft(common_ngram_cache & nc_primary, const std::vector<common_ngram> & ngrams_primary,
                                   const int * min_sample_size, const int * min_percent) {
    llama_token drafted_token = LLAMA_TOKEN_NULL;
    for (int i = ngrams_primary.size()-1; i >= 0 && drafted_token == LLAMA_TOKEN_NULL; --i) {
        const common_ngram ngram_primary = ngrams_primary[i];
        common_ngram_cache::iterator part_primary_it = nc_primary.find(ngram_primary);
        if (part_primary_it == nc_primary.end()) {
            continue;
        }
        const common_ngram_cache_part part_primary = part_primary_it->second;
        int max_count_primary = 0;
        int max_count_static  = 0;
        int sum_count_primary = 0;
        llama_token max_token = LLAMA_TOKEN_NULL;
        for (std::pair<llama_token, int> token_count_primary : part_primary) {
            const llama_token token = token_count_primary.first;
            const int32_t count_primary = token_count_primary.second;
            const int32_t count_static  = 1;
            if (count_primary*count_static > max_count_primary*max_count_static) {
                max_token         = token;
                max_count_primary = count_primary;
                max_count_static  = count_static;
            }
            sum_count_primary += count_primary;
        }
        if (sum_count_primary < min_sample_size[i]) {
            continue;
        }
        if (100*max_count_primary < min_percent[i]*sum_count_primary) {
            continue;
        }
        drafted_token = max_token;
    }
    return drafted_token;
}

static void ngram_cache_draft(std::vector<llama_token> & inp, std::vector<llama_token> & draft, int n_draft,
                              int ngram_min, int ngram_max, common_ngram_cache & nc_context) {
    const int inp_size = inp.size();
    if (inp_size < LLAMA_NGRAM_STATIC) {
        return;
    }
    while ((int) draft.size()-1 < n_draft) {
        std::vector<common_ngram> ngrams_cd;
        for (int ngram_size_cd = ngram_min; ngram_size_cd <= ngram_max; ++ngram_size_cd) {
            const int ngram_start_cd = inp_size-ngram_size_cd + draft.size()-1;
            common_ngram ngram_cd;
            for (int j = ngram_start_cd; j < ngram_start_cd + ngram_size_cd; ++j) {
                ngram_cd.tokens[j-ngram_start_cd] = ngram_get_token(inp, draft, j);
            }
            ngrams_cd.push_back(ngram_cd);
        }
        const llama_token drafted_token =
            ngram_try_draft(nc_context, ngrams_cd, draft_min_sample_size_lax, draft_min_percent_lax);
        if (drafted_token == LLAMA_TOKEN_NULL) {
            break;
        }
        draft.push_back(drafted_token);
    }
}

static int cmd_lookup(int argc, char ** argv) {
    if (argc < 6) return 2;
    const int n_predict = atoi(argv[4]), k = atoi(argv[5]);
    const int n_ctx = argc > 6 ? atoi(argv[6]) : 4096;
    const int n_threads = argc > 7 ? atoi(argv[7]) : 2;
    const bool ignore_eos = argc > 8 && atoi(argv[8]) != 0;
    llama_model * model = load(argv[2], false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context * ctx = make_context(model, n_ctx, n_threads);
    std::vector<llama_token> inp = parse_ids(argv[3]);
    if (inp.empty() || n_predict < 1 || k < 0) return 2;
    const int room = n_ctx - (int) inp.size();
    common_ngram_cache ngrams;
    ngram_cache_update(ngrams, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, inp, (int) inp.size());
    std::vector<llama_token> head(inp.begin(), inp.end() - 1);
    if (!head.empty()) decode_prompt(ctx, head, 2048);
    llama_batch batch = llama_batch_init(k + 1, 0, 1);
    fill_batch(batch, {inp.back()}, (int) head.size(), true);
    decode_or_die(ctx, batch);
    int n_past = (int) inp.size();
    Speculated run;
    auto on_token = [&](llama_token id) {
        inp.push_back(id);
        ngram_cache_update(ngrams, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, inp, 1);
    };
    // The first token, from the prompt's last pass.
    keep_agreed(run, ctx, vocab, {}, n_predict, ignore_eos, room, on_token);
    const auto start = std::chrono::steady_clock::now();
    while (!run.done) {
        const int n_draft = std::max(0, std::min({k, n_predict - (int) run.out.size() - 1, n_ctx - n_past - 2}));
        std::vector<llama_token> draft = {run.out.back()};
        ngram_cache_draft(inp, draft, n_draft, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, ngrams);
        fill_batch(batch, draft, n_past, true);
        decode_or_die(ctx, batch);
        ++run.passes;
        run.drafted += (int) draft.size() - 1;
        const std::vector<llama_token> guesses(draft.begin() + 1, draft.end());
        n_past += keep_agreed(run, ctx, vocab, guesses, n_predict, ignore_eos, room, on_token);
        llama_memory_seq_rm(llama_get_memory(ctx), 0, n_past, -1);
    }
    const double decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print_speculated(run, vocab, ignore_eos, decode_s, run.out.size() - 1);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static llama_context * make_multi_context(llama_model * model, int n_ctx, int n_threads, int n_seq) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.swa_full = false;
    cp.n_seq_max = n_seq;
    cp.flash_attn_type = flash_attn;
    cp.type_k = cache_type_k;
    cp.type_v = cache_type_v;
    cp.offload_kqv = kv_offload;
    cp.kv_unified = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); exit(1); }
    return ctx;
}

static int cmd_lockstep(int argc, char ** argv) {
    if (argc < 8) return 2;
    int n_predict = atoi(argv[3]);
    int n_ctx = atoi(argv[4]);
    int n_threads = atoi(argv[5]);
    bool ignore_eos = atoi(argv[6]) != 0;
    std::vector<std::vector<llama_token>> prompts;
    for (int i = 7; i < argc; ++i) prompts.push_back(parse_ids(argv[i]));
    const int n_seq = (int) prompts.size();
    llama_model * model = load(argv[2], false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context * ctx = make_multi_context(model, n_ctx, n_threads, n_seq);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_ubatch = 512;
    std::vector<size_t> fed(n_seq, 0);
    std::vector<int> pos(n_seq, 0);
    std::vector<std::vector<llama_token>> out(n_seq);
    std::vector<bool> pending(n_seq, false), done(n_seq, false);
    llama_batch batch = llama_batch_init(n_ubatch, 0, 1);
    auto add = [&](llama_token id, int seq, bool logits) {
        int i = batch.n_tokens++;
        batch.token[i] = id;
        batch.pos[i] = pos[seq]++;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = seq;
        batch.logits[i] = logits;
    };
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        batch.n_tokens = 0;
        std::vector<std::pair<int, int>> outputs;  // (sequence, batch index)
        for (int s = 0; s < n_seq; ++s) {
            if (done[s] || !pending[s] || batch.n_tokens == n_ubatch) continue;
            outputs.push_back({s, batch.n_tokens});
            add(out[s].back(), s, true);
            pending[s] = false;
        }
        for (int s = 0; s < n_seq; ++s) {
            size_t left = prompts[s].size() - fed[s];
            if (done[s] || left == 0 || batch.n_tokens == n_ubatch) continue;
            size_t n = std::min(left, (size_t) (n_ubatch - batch.n_tokens));
            bool last = fed[s] + n == prompts[s].size();
            for (size_t j = 0; j < n; ++j) add(prompts[s][fed[s] + j], s, last && j + 1 == n);
            if (last) outputs.push_back({s, batch.n_tokens - 1});
            fed[s] += n;
        }
        if (batch.n_tokens == 0) break;
        if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        for (auto [s, i] : outputs) {
            const float * logits = llama_get_logits_ith(ctx, i);
            llama_token id = (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
            out[s].push_back(id);
            bool stop = (!ignore_eos && llama_vocab_is_eog(vocab, id)) || (int) out[s].size() >= n_predict ||
                        (int) (prompts[s].size() + out[s].size()) >= n_ctx;
            if (stop) done[s] = true; else pending[s] = true;
        }
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int s = 0; s < n_seq; ++s) {
        for (size_t i = 0; i < out[s].size(); ++i) printf(i ? " %d" : "%d", out[s][i]);
        printf("\n");
    }
    fprintf(stderr, "elapsed_s %.6f\n", elapsed);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int cmd_continue(int argc, char ** argv) {
    if (argc < 9) return 2;
    int n_predict = atoi(argv[3]);
    int n_ctx = atoi(argv[4]);
    int n_threads = atoi(argv[5]);
    bool ignore_eos = atoi(argv[6]) != 0;
    llama_model * model = load(argv[2], false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context * ctx = make_context(model, n_ctx, n_threads);
    llama_sampler * smpl = llama_sampler_init_greedy();
    std::vector<llama_token> fresh = parse_ids(argv[7]);
    const std::vector<llama_token> more = parse_ids(argv[8]);
    int n_past = 0;
    for (int turn = 0; turn < 2; ++turn) {
        decode_prompt(ctx, fresh, 2048);
        n_past += (int) fresh.size();
        std::vector<llama_token> out;
        for (int i = 0; i < n_predict; ++i) {
            llama_token id = llama_sampler_sample(smpl, ctx, -1);
            out.push_back(id);
            if (!ignore_eos && llama_vocab_is_eog(vocab, id)) break;
            if (n_past + 1 >= n_ctx || i + 1 == n_predict) break;
            if (llama_decode(ctx, llama_batch_get_one(&id, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
            ++n_past;
        }
        for (size_t i = 0; i < out.size(); ++i) printf(i ? " %d" : "%d", out[i]);
        printf("\n");
        // The next prompt repeats the conversation so far: the cache lacks the last id and what follows.
        fresh.assign(1, out.back());
        fresh.insert(fresh.end(), more.begin(), more.end());
    }
    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

// --embd-out: where the mtmd command writes its image chunks' embeddings (empty: nowhere).
static std::string embd_out;

static int cmd_mtmd(int argc, char ** argv) {
    if (argc < 7) return 2;
    int n_predict = atoi(argv[5]);
    // N_CTX, N_THREADS and N_BATCH where the next arguments are numbers; the images follow.
    int numbers[3] = {4096, 2, 0};
    int a = 6;
    for (int k = 0; k < 3 && a < argc && argv[a][0] && strspn(argv[a], "0123456789") == strlen(argv[a]); ++k, ++a) {
        numbers[k] = atoi(argv[a]);
    }
    const int n_ctx = numbers[0], n_threads = numbers[1];
    std::vector<const char *> images(argv + a, argv + argc);
    if (images.empty()) return 2;
    std::ifstream in(argv[4]);
    std::string hex;
    std::getline(in, hex);
    const std::string prompt = from_hex(hex);

    llama_model * model = load(argv[2], false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context * ctx = make_context(model, n_ctx, n_threads);
    const int n_batch = numbers[2] > 0 ? numbers[2] : (int) llama_n_batch(ctx);

    // As llama-mtmd-cli sets them, on the CPU, without the timings' log or the warmup pass.
    mtmd_context_params mp = mtmd_context_params_default();
    mp.use_gpu = false;
    mp.print_timings = false;
    mp.n_threads = n_threads;
    mp.flash_attn_type = flash_attn;
    mp.warmup = false;
    mtmd_context * mctx = mtmd_init_from_file(argv[3], model, mp);
    if (!mctx) { fprintf(stderr, "failed to load %s\n", argv[3]); return 1; }

    std::vector<mtmd_bitmap *> bitmaps;
    for (const char * path : images) {
        mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_file(mctx, path, false, mtmd_helper_init_opt_default());
        if (!w.bitmap) { fprintf(stderr, "failed to load the image or audio %s\n", path); return 1; }
        bitmaps.push_back(w.bitmap);
    }
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    mtmd_input_text text = {prompt.c_str(), prompt.size(), /* add_special */ true, /* parse_special */ true};
    if (int32_t res = mtmd_tokenize(mctx, chunks, &text, bitmaps.data(), bitmaps.size())) {
        fprintf(stderr, "mtmd_tokenize failed (%d)\n", res);
        return 1;
    }

    // mtmd_helper_eval_chunks, chunk by chunk as it goes (mtmd_helper_eval_chunk_single for
    // text; for an image, its steps: mtmd_encode_chunk, timed here, and
    // mtmd_helper_decode_image_chunk of mtmd_get_output_embd), so that the encoding's time
    // and output can be taken.
    FILE * embd_file = embd_out.empty() ? nullptr : fopen(embd_out.c_str(), "wb");
    if (!embd_out.empty() && !embd_file) { fprintf(stderr, "cannot write %s\n", embd_out.c_str()); return 1; }
    const int n_embd = llama_model_n_embd_inp(model);
    const size_t n_chunks = mtmd_input_chunks_size(chunks);
    std::vector<double> encode_ms;
    llama_pos n_past = 0;
    const auto prompt_t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n_chunks; ++i) {
        const mtmd_input_chunk * chunk = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token * ids = mtmd_input_chunk_get_tokens_text(chunk, &n);
            printf("chunk text");
            for (size_t t = 0; t < n; ++t) printf(" %d", ids[t]);
            printf("\n");
            if (mtmd_helper_eval_chunk_single(mctx, ctx, chunk, n_past, 0, n_batch, i == n_chunks - 1, &n_past)) {
                fprintf(stderr, "failed to evaluate chunk %zu\n", i);
                return 1;
            }
            continue;
        }
        const size_t n_tokens = mtmd_input_chunk_get_n_tokens(chunk);
        if (mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_AUDIO) {
            // One log-mel piece of an audio file (mtmd_tokenize's "consider each mel_spec as a
            // separate audio chunk").
            printf("chunk audio %zu %d\n", n_tokens, (int) mtmd_input_chunk_get_n_pos(chunk));
        } else {
            const mtmd_image_tokens * image = mtmd_input_chunk_get_tokens_image(chunk);
            if (!image) { fprintf(stderr, "chunk %zu is neither text, an image nor audio\n", i); return 1; }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            printf("chunk image %zu %d %zu %zu\n", n_tokens, (int) mtmd_input_chunk_get_n_pos(chunk),
                   mtmd_image_tokens_get_nx(image), mtmd_image_tokens_get_ny(image));
#pragma GCC diagnostic pop
        }
        auto t0 = std::chrono::steady_clock::now();
        if (mtmd_encode_chunk(mctx, chunk)) { fprintf(stderr, "failed to encode chunk %zu\n", i); return 1; }
        encode_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        float * embd = mtmd_get_output_embd(mctx);
        if (embd_file && fwrite(embd, sizeof(float), n_tokens * n_embd, embd_file) != n_tokens * n_embd) {
            fprintf(stderr, "cannot write %s\n", embd_out.c_str());
            return 1;
        }
        if (mtmd_helper_decode_image_chunk(mctx, ctx, chunk, embd, n_past, 0, n_batch, &n_past, nullptr, nullptr)) {
            fprintf(stderr, "failed to decode chunk %zu\n", i);
            return 1;
        }
    }
    double prompt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - prompt_t0).count();
    for (double ms : encode_ms) prompt_s -= ms / 1000.0;
    if (embd_file) fclose(embd_file);
    printf("n_embd %d\nn_past %d\nencode_ms", n_embd, (int) n_past);
    for (double ms : encode_ms) printf(" %.3f", ms);
    printf("\n");

    // generate's greedy decoding from the prompt's logits, one token a batch (each pass timed).
    llama_sampler * smpl = llama_sampler_init_greedy();
    double decode_s = 0;
    int n_decoded = 0;
    std::vector<llama_token> out;
    std::vector<float> margins;
    std::string generated;
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n_predict; ++i) {
        margins.push_back(top_two_margin(llama_get_logits_ith(ctx, -1), n_vocab));
        llama_token id = llama_sampler_sample(smpl, ctx, -1);
        out.push_back(id);
        if (llama_vocab_is_eog(vocab, id)) break;
        generated += piece(vocab, id, false);
        if ((int) (n_past + out.size()) >= n_ctx) break;
        const auto t0 = std::chrono::steady_clock::now();
        if (llama_decode(ctx, llama_batch_get_one(&id, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
        decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++n_decoded;
    }
    fprintf(stderr, "prompt_s %.6f prompt_tokens %d decode_s %.6f tokens %d\n", prompt_s, (int) n_past, decode_s,
            n_decoded);
    for (size_t i = 0; i < out.size(); ++i) printf(i ? " %d" : "%d", out[i]);
    printf("\n%s\n", to_hex(generated).c_str());
    for (size_t i = 0; i < margins.size(); ++i) printf(i ? " %.9g" : "%.9g", margins[i]);
    printf("\n");
    llama_sampler_free(smpl);
    mtmd_input_chunks_free(chunks);
    for (mtmd_bitmap * b : bitmaps) mtmd_bitmap_free(b);
    mtmd_free(mctx);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int cmd_tokenize(int argc, char ** argv) {
    if (argc < 4) return 2;
    bool add_special = argc > 4 ? atoi(argv[4]) != 0 : true;
    bool parse_special = argc > 5 ? atoi(argv[5]) != 0 : true;
    llama_model * model = load(argv[2], true);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::ifstream in(argv[3]);
    std::string line;
    while (std::getline(in, line)) {
        std::string text = from_hex(line);
        int n = -llama_tokenize(vocab, text.data(), (int) text.size(), nullptr, 0, add_special, parse_special);
        std::vector<llama_token> ids(std::max(n, 0));
        llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), n, add_special, parse_special);
        for (size_t i = 0; i < ids.size(); ++i) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    llama_model_free(model);
    return 0;
}

static int cmd_detokenize(int argc, char ** argv) {
    if (argc < 4) return 2;
    llama_model * model = load(argv[2], true);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::ifstream in(argv[3]);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        std::vector<llama_token> ids;
        llama_token id;
        while (ss >> id) ids.push_back(id);
        printf("%s %s\n", to_hex(detokenize(vocab, ids, false)).c_str(), to_hex(detokenize(vocab, ids, true)).c_str());
    }
    llama_model_free(model);
    return 0;
}

// FNV-1a 64: a digest of every piece keeps vocab's answer (and the golden) a
// few lines long; blocks narrow a mismatch down to 4096 ids.
struct Fnv {
    uint64_t h = 0xcbf29ce484222325ull;
    void add(const std::string & bytes) {
        for (unsigned char c : bytes) { h ^= c; h *= 0x100000001b3ull; }
    }
};

static int cmd_vocab(int argc, char ** argv) {
    if (argc < 3) return 2;
    const int block = 4096;
    llama_model * model = load(argv[2], true);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n = llama_vocab_n_tokens(vocab);
    printf("n_vocab %d\nbos %d\neos %d\nadd_bos %d\nadd_eos %d\neog", n, llama_vocab_bos(vocab), llama_vocab_eos(vocab),
           (int) llama_vocab_get_add_bos(vocab), (int) llama_vocab_get_add_eos(vocab));
    for (llama_token id = 0; id < n; ++id) {
        if (llama_vocab_is_eog(vocab, id)) printf(" %d", id);
    }
    printf("\n");
    for (int special = 0; special <= 1; ++special) {
        printf("pieces_special_%d", special);
        for (int start = 0; start < n; start += block) {
            Fnv fnv;
            for (llama_token id = start; id < n && id < start + block; ++id) {
                std::string p = piece(vocab, id, special);
                uint32_t len = (uint32_t) p.size();  // little-endian on every host we run
                fnv.add(std::string((const char *) &len, 4));
                fnv.add(p);
            }
            printf(" %016llx", (unsigned long long) fnv.h);
        }
        printf("\n");
    }
    llama_model_free(model);
    return 0;
}

static std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool parse_special) {
    int n = -llama_tokenize(vocab, text.data(), (int) text.size(), nullptr, 0, false, parse_special);
    std::vector<llama_token> ids(std::max(n, 0));
    llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), n, false, parse_special);
    return ids;
}

// unicode_cpt_to_utf8, which llama.h does not export.
static std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += (char) cp;
    else if (cp < 0x800) { s += (char) (0xC0 | (cp >> 6)); s += (char) (0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { s += (char) (0xE0 | (cp >> 12)); s += (char) (0x80 | ((cp >> 6) & 0x3F)); s += (char) (0x80 | (cp & 0x3F)); }
    else { s += (char) (0xF0 | (cp >> 18)); s += (char) (0x80 | ((cp >> 12) & 0x3F)); s += (char) (0x80 | ((cp >> 6) & 0x3F)); s += (char) (0x80 | (cp & 0x3F)); }
    return s;
}

static int cmd_roundtrip(int argc, char ** argv) {
    if (argc < 3) return 2;
    llama_model * model = load(argv[2], true);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    // test-tokenizer-1-bpe tokenizes code points without parsing special
    // tokens, test-tokenizer-1-spm with.
    const bool parse_special = llama_vocab_type(vocab) != LLAMA_VOCAB_TYPE_BPE;
    auto failed = [](Fnv & fnv, int & n, uint32_t id) {
        fnv.add(std::string((const char *) &id, 4));  // little-endian on every host we run
        ++n;
    };
    Fnv tokens, code_points;
    int n_tokens = 0, n_code_points = 0;
    for (llama_token id = 0; id < llama_vocab_n_tokens(vocab); ++id) {
        std::string text = detokenize(vocab, {id}, true);
        if (detokenize(vocab, tokenize(vocab, text, true), true) != text) failed(tokens, n_tokens, id);
    }
    for (uint32_t cp = 0; cp < 0x110000; ++cp) {
        if ((0xD800 <= cp && cp <= 0xDFFF) || (0x40000 <= cp && cp <= 0xE0000)) continue;
        std::string text = utf8(cp);
        if (cp != 9601 && detokenize(vocab, tokenize(vocab, text, parse_special), true) != text) {
            failed(code_points, n_code_points, cp);
        }
    }
    printf("tokens %d %016llx\ncode_points %d %016llx\n", n_tokens, (unsigned long long) tokens.h, n_code_points,
           (unsigned long long) code_points.h);
    llama_model_free(model);
    return 0;
}

static int cmd_chat(int argc, char ** argv) {
    if (argc < 4) return 2;
    llama_model * model = load(argv[2], false);
    std::ifstream in(argv[3]);
    std::vector<std::string> roles, contents;
    std::string line;
    while (std::getline(in, line)) {
        size_t tab = line.find('\t');
        roles.push_back(line.substr(0, tab));
        contents.push_back(from_hex(line.substr(tab + 1)));
    }
    std::vector<llama_chat_message> msgs;
    for (size_t i = 0; i < roles.size(); ++i) msgs.push_back({roles[i].c_str(), contents[i].c_str()});
    const char * tmpl = llama_model_chat_template(model, nullptr);
    std::vector<char> buf(1 << 20);
    int n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), true, buf.data(), (int) buf.size());
    if (n < 0) { fprintf(stderr, "template not supported\n"); return 1; }
    printf("%s\n", to_hex(std::string(buf.data(), n)).c_str());
    llama_model_free(model);
    return 0;
}

// common_embd_normalize (common/common.cpp), copied: the reference links only
// libllama. The same float and double arithmetic, so the bits are llama-embedding's.
static void embd_normalize(const float * inp, float * out, int n, int embd_norm) {
    double sum = 0.0;

    switch (embd_norm) {
        case -1: // no normalisation
            sum = 1.0;
            break;
        case 0: // max absolute
            for (int i = 0; i < n; i++) {
                if (sum < std::abs(inp[i])) {
                    sum = std::abs(inp[i]);
                }
            }
            sum /= 32760.0; // make an int16 range
            break;
        case 2: // euclidean
            for (int i = 0; i < n; i++) {
                sum += inp[i] * inp[i];
            }
            sum = std::sqrt(sum);
            break;
        default: // p-norm (euclidean is p-norm p=2)
            for (int i = 0; i < n; i++) {
                sum += std::pow(std::abs(inp[i]), embd_norm);
            }
            sum = std::pow(sum, 1.0 / embd_norm);
            break;
    }

    const float norm = sum > 0.0 ? 1.0 / sum : 0.0f;

    for (int i = 0; i < n; i++) {
        out[i] = inp[i] * norm;
    }
}

static bool pooling_from_name(const std::string & name, enum llama_pooling_type & out) {
    static const std::pair<const char *, enum llama_pooling_type> names[] = {
        {"default", LLAMA_POOLING_TYPE_UNSPECIFIED}, {"none", LLAMA_POOLING_TYPE_NONE},
        {"mean", LLAMA_POOLING_TYPE_MEAN},           {"cls", LLAMA_POOLING_TYPE_CLS},
        {"last", LLAMA_POOLING_TYPE_LAST},           {"rank", LLAMA_POOLING_TYPE_RANK},
    };
    for (auto & [n, type] : names) {
        if (name == n) { out = type; return true; }
    }
    return false;
}

static void print_bits(const float * values, int n) {
    for (int i = 0; i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, &values[i], 4);
        printf(i ? " %08x" : "%08x", bits);
    }
    printf("\n");
}

static int cmd_embed(int argc, char ** argv) {
    if (argc < 9) return 2;
    const int n_ctx = atoi(argv[4]);
    const int n_threads = atoi(argv[5]);
    enum llama_pooling_type pooling;
    if (!pooling_from_name(argv[6], pooling)) { fprintf(stderr, "unknown pooling %s\n", argv[6]); return 2; }
    const int normalize = atoi(argv[7]);
    const int batch_texts = atoi(argv[8]);
    if (n_ctx <= 0 || batch_texts <= 0) return 2;

    std::vector<std::vector<llama_token>> inputs;
    {
        std::ifstream in(argv[3]);
        std::string line;
        while (std::getline(in, line)) inputs.push_back(parse_ids(line.c_str()));
    }

    llama_model * model = load(argv[2], false);
    llama_context_params cp = llama_context_default_params();
    cp.embeddings = true;
    cp.pooling_type = pooling;
    cp.n_ctx = n_ctx;
    // llama-embedding raises n_batch (-b, 2048 by default) to n_ctx when it is
    // smaller, and sets n_ubatch = n_batch unless --attention causal is given (the
    // test is on the flag, not the model: unset, every model gets one ubatch per
    // batch; common_init_from_params also lowers n_batch to n_ubatch when
    // embeddings are on). llama_context then caps n_batch at n_ctx for causal
    // models.
    cp.n_batch = (uint32_t) std::max(n_ctx, 2048);
    cp.n_ubatch = cp.n_batch;
    cp.flash_attn_type = flash_attn;
    cp.type_k = cache_type_k;
    cp.type_v = cache_type_v;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.swa_full = false;  // common_params' default
    // With --parallel 1 (its default) llama-embedding asks for a unified KV cache
    // and llama_max_parallel_sequences() sequences (256); elelem's engine has at
    // most 64, so we cap here: with a unified cache n_seq_max changes no
    // computation, only which sequence ids a batch may use.
    cp.kv_unified = true;
    cp.n_seq_max = (uint32_t) std::min<size_t>(llama_max_parallel_sequences(), 64);
    if (batch_texts > (int) cp.n_seq_max) { fprintf(stderr, "BATCH_TEXTS above %u\n", cp.n_seq_max); return 2; }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 1; }

    const enum llama_pooling_type pooling_used = llama_pooling_type(ctx);
    const int n_embd_out = llama_model_n_embd_out(model);
    const int n_cls_out = (int) llama_model_n_cls_out(model);
    // embedding.cpp packs up to its n_batch; where llama_context capped that (a
    // causal model, n_ctx below it) llama_decode would refuse the batch, so we
    // pack up to the context's n_batch instead.
    const int n_batch = (int) llama_n_batch(ctx);
    for (auto & inp : inputs) {
        if ((int) inp.size() > n_batch || inp.empty()) {
            fprintf(stderr, "a text of %zu tokens: empty, or more than the batch size %d\n", inp.size(), n_batch);
            return 1;
        }
    }

    llama_batch batch = llama_batch_init(n_batch, 0, 1);
    std::vector<std::vector<float>> out;  // one row per text, or per token with pooling none
    auto decode = [&](int n_seq) {
        llama_memory_clear(llama_get_memory(ctx), true);  // embedding.cpp's batch_decode does it first
        if (llama_decode(ctx, batch) < 0) { fprintf(stderr, "decode failed\n"); exit(1); }
        if (pooling_used == LLAMA_POOLING_TYPE_NONE) {
            for (int i = 0; i < batch.n_tokens; ++i) {
                const float * embd = llama_get_embeddings_ith(ctx, i);
                if (!embd) { fprintf(stderr, "no token embeddings\n"); exit(1); }
                out.emplace_back(n_embd_out);
                embd_normalize(embd, out.back().data(), n_embd_out, normalize);
            }
        } else {
            for (int s = 0; s < n_seq; ++s) {
                const float * embd = llama_get_embeddings_seq(ctx, s);
                if (!embd) { fprintf(stderr, "no sequence embeddings\n"); exit(1); }
                if (pooling_used == LLAMA_POOLING_TYPE_RANK) {
                    out.emplace_back(embd, embd + n_cls_out);
                } else {
                    out.emplace_back(n_embd_out);
                    embd_normalize(embd, out.back().data(), n_embd_out, normalize);
                }
            }
        }
        batch.n_tokens = 0;
    };

    const auto start = std::chrono::steady_clock::now();
    int s = 0;  // texts in the batch
    for (auto & inp : inputs) {
        if (batch.n_tokens + (int) inp.size() > n_batch || s >= batch_texts) {
            decode(s);
            s = 0;
        }
        for (size_t j = 0; j < inp.size(); ++j) {
            int i = batch.n_tokens++;
            batch.token[i] = inp[j];
            batch.pos[i] = (llama_pos) j;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = s;
            batch.logits[i] = true;
        }
        s += 1;
    }
    if (s > 0) decode(s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    for (auto & row : out) print_bits(row.data(), (int) row.size());
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    fprintf(stderr, "seconds %.6f\nmax_rss_kib %ld\n", seconds, usage.ru_maxrss);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

// The sequence `serve` grows and cuts back: positions [0, filled) hold context
// tokens that a later `tg` at a depth up to `filled` can keep.
struct Session {
    llama_context * ctx;
    int n_vocab;
    bool refill;  // sliding-window layers: a cut-back cache may miss the window, so start afresh
    int filled = 0;

    void random_prompt(int n) {
        std::vector<llama_token> ids(n);
        for (auto & id : ids) id = std::rand() % n_vocab;
        decode_prompt(ctx, ids, 2048);
    }
    void clear() { llama_memory_clear(llama_get_memory(ctx), true); filled = 0; }

    double pp(int n) {
        clear();
        auto t0 = std::chrono::steady_clock::now();
        random_prompt(n);
        llama_synchronize(ctx);
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    double tg(int n, int depth) {
        if (refill) clear();
        filled = std::min(filled, depth);
        llama_memory_seq_rm(llama_get_memory(ctx), 0, filled, -1);
        if (depth > filled) random_prompt(depth - filled);
        filled = depth;
        llama_token id = std::rand() % n_vocab;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) {
            if (llama_decode(ctx, llama_batch_get_one(&id, 1))) { fprintf(stderr, "decode failed\n"); exit(1); }
            llama_synchronize(ctx);
        }
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
};

static int cmd_serve(int argc, char ** argv) {
    if (argc < 5) return 2;
    int n_threads = atoi(argv[3]), n_ctx = atoi(argv[4]);
    auto t_load = std::chrono::steady_clock::now();
    llama_model * model = load(argv[2], false);
    llama_context * ctx = make_context(model, n_ctx, n_threads);
    printf("load_ms %.3f\n", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count());
    fflush(stdout);
    std::srand(42);
    Session session{ctx, llama_vocab_n_tokens(llama_model_get_vocab(model)), llama_model_n_swa(model) > 0};
    char line[128], what[8];
    while (fgets(line, sizeof line, stdin)) {
        int n = 0, depth = 0;
        int fields = sscanf(line, "%7s %d %d", what, &n, &depth);
        bool ok = fields >= 2 && n > 0 && depth >= 0 && (long) n + depth <= n_ctx;
        if (ok && !strcmp(what, "pp")) printf("pp %.3f\n", session.pp(n));
        else if (ok && !strcmp(what, "tg")) printf("tg %.3f\n", session.tg(n, depth));
        else printf("error %s", line);
        fflush(stdout);
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

int main(int argc, char ** argv) {
    // Take the -o options out of argv, leaving each command its positional
    // arguments where it expects them.
    bool options_ok = true;
    int n_args = 1;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-o")) options_ok = options_ok && i + 1 < argc && add_override(argv[++i]);
        else if (!strcmp(argv[i], "-fa")) options_ok = options_ok && i + 1 < argc && set_flash_attn(argv[++i]);
        else if (!strcmp(argv[i], "-ctk")) options_ok = options_ok && i + 1 < argc && set_cache_type(cache_type_k, argv[++i]);
        else if (!strcmp(argv[i], "-ctv")) options_ok = options_ok && i + 1 < argc && set_cache_type(cache_type_v, argv[++i]);
        else if (!strcmp(argv[i], "--rpc")) options_ok = options_ok && i + 1 < argc && add_rpc_servers(argv[++i]);
        else if (!strcmp(argv[i], "-ngl")) options_ok = options_ok && i + 1 < argc && (n_gpu_layers = atoi(argv[++i]), true);
        else if (!strcmp(argv[i], "-nkvo")) kv_offload = false;
        else if (!strcmp(argv[i], "-sm")) options_ok = options_ok && i + 1 < argc && set_split_mode(argv[++i]);
        else if (!strcmp(argv[i], "-mg")) options_ok = options_ok && i + 1 < argc && (main_gpu = atoi(argv[++i]), true);
        else if (!strcmp(argv[i], "--embd-out")) options_ok = options_ok && i + 1 < argc && (embd_out = argv[++i], true);
        else argv[n_args++] = argv[i];
    }
    argc = n_args;
    overrides.push_back(llama_model_kv_override{});  // the terminator

    if (!getenv("ELELEM_REFERENCE_VERBOSE")) {
        llama_log_set(quiet_log, nullptr);
        mtmd_helper_log_set(quiet_log, nullptr);
    }
    if (!load_cpu_variant()) return 1;
    llama_backend_init();
    int rc = 2;
    const char * cmd = options_ok && argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "generate")) rc = cmd_generate(argc, argv);
    else if (!strcmp(cmd, "grammar")) rc = cmd_grammar(argc, argv);
    else if (!strcmp(cmd, "lockstep")) rc = cmd_lockstep(argc, argv);
    else if (!strcmp(cmd, "continue")) rc = cmd_continue(argc, argv);
    else if (!strcmp(cmd, "speculative")) rc = cmd_speculative(argc, argv);
    else if (!strcmp(cmd, "lookup")) rc = cmd_lookup(argc, argv);
    else if (!strcmp(cmd, "tokenize")) rc = cmd_tokenize(argc, argv);
    else if (!strcmp(cmd, "detokenize")) rc = cmd_detokenize(argc, argv);
    else if (!strcmp(cmd, "vocab")) rc = cmd_vocab(argc, argv);
    else if (!strcmp(cmd, "roundtrip")) rc = cmd_roundtrip(argc, argv);
    else if (!strcmp(cmd, "chat")) rc = cmd_chat(argc, argv);
    else if (!strcmp(cmd, "serve")) rc = cmd_serve(argc, argv);
    else if (!strcmp(cmd, "embed")) rc = cmd_embed(argc, argv);
    else if (!strcmp(cmd, "mtmd")) rc = cmd_mtmd(argc, argv);
    if (rc == 2) fprintf(stderr, "usage: see the header of tools/reference/reference.cpp\n");
    llama_backend_free();
    return rc;
}
