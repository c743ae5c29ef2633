// Asks the reference llama.cpp (the library elelem-reference links) the
// tokenizer questions the driver does not: detokenization and per-token facts.
// Built and run by tools/reference/tokenizer_goldens.rb.
//
//   tokenizer_probe detokenize MODEL FILE
//       FILE holds one line of space-separated token ids per case; prints one
//       line per case: hex(detokenize special=0) hex(detokenize special=1),
//       each as common_detokenize does it (remove_special = false).
//   tokenizer_probe vocab MODEL
//       Prints n_vocab, bos, eos, add_bos, add_eos, the EOG ids, and FNV-1a 64
//       digests of token_to_piece(id, lstrip 0, special) over blocks of 4096
//       ids: each id contributes its piece length (u32 LE), then its bytes.
#include "llama.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static const int BLOCK = 4096;

static void quiet_log(ggml_log_level, const char *, void *) {}

static std::string to_hex(const std::string & s) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) { out += digits[c >> 4]; out += digits[c & 15]; }
    return out;
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

struct Fnv {
    uint64_t h = 0xcbf29ce484222325ull;
    void add(const std::string & bytes) {
        for (unsigned char c : bytes) { h ^= c; h *= 0x100000001b3ull; }
    }
};

int main(int argc, char ** argv) {
    if (argc < 3) return 2;
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", argv[2]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string cmd = argv[1];

    if (cmd == "detokenize" && argc >= 4) {
        std::ifstream in(argv[3]);
        std::string line;
        while (std::getline(in, line)) {
            std::istringstream ss(line);
            std::vector<llama_token> ids;
            llama_token id;
            while (ss >> id) ids.push_back(id);
            printf("%s %s\n", to_hex(detokenize(vocab, ids, false)).c_str(), to_hex(detokenize(vocab, ids, true)).c_str());
        }
    } else if (cmd == "vocab") {
        const int n = llama_vocab_n_tokens(vocab);
        printf("n_vocab %d\nbos %d\neos %d\nadd_bos %d\nadd_eos %d\neog", n, llama_vocab_bos(vocab), llama_vocab_eos(vocab),
               (int) llama_vocab_get_add_bos(vocab), (int) llama_vocab_get_add_eos(vocab));
        for (llama_token id = 0; id < n; ++id) {
            if (llama_vocab_is_eog(vocab, id)) printf(" %d", id);
        }
        printf("\n");
        for (int special = 0; special <= 1; ++special) {
            printf("pieces_special_%d", special);
            for (int start = 0; start < n; start += BLOCK) {
                Fnv fnv;
                for (llama_token id = start; id < n && id < start + BLOCK; ++id) {
                    std::string p = piece(vocab, id, special);
                    uint32_t len = (uint32_t) p.size();
                    fnv.add(std::string((const char *) &len, 4));
                    fnv.add(p);
                }
                printf(" %016llx", (unsigned long long) fnv.h);
            }
            printf("\n");
        }
    } else {
        return 2;
    }
    llama_model_free(model);
    return 0;
}
