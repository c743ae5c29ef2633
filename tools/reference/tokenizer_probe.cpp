// Asks the reference llama.cpp (the library elelem-reference links) the
// tokenizer questions the driver does not: detokenization, per-token facts,
// and tokenization with metadata overridden. Built and run by
// tools/reference/tokenizer_goldens.rb.
//
// Every command takes any number of `-o KEY=true|false` options, which
// override boolean metadata the way llama.cpp's --override-kv does.
//
//   tokenizer_probe tokenize MODEL FILE ADD_SPECIAL PARSE_SPECIAL
//       As `elelem-reference tokenize`: FILE holds one hex-encoded string per
//       line; prints one line of ids per string.
//   tokenizer_probe detokenize MODEL FILE
//       FILE holds one line of space-separated token ids per case; prints one
//       line per case: hex(detokenize special=0) hex(detokenize special=1),
//       each as common_detokenize does it (remove_special = false).
//   tokenizer_probe vocab MODEL
//       Prints n_vocab, bos, eos, add_bos, add_eos, the EOG ids, and FNV-1a 64
//       digests of token_to_piece(id, lstrip 0, special) over blocks of 4096
//       ids: each id contributes its piece length (u32 LE), then its bytes.
#include "llama.h"

#include <algorithm>
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

static std::string from_hex(const std::string & h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) out += (char) std::stoi(h.substr(i, 2), nullptr, 16);
    return out;
}

int main(int argc, char ** argv) {
    std::vector<std::string> args;
    std::vector<llama_model_kv_override> overrides;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-o" && i + 1 < argc) {
            std::string kv = argv[++i];
            size_t eq = kv.find('=');
            if (eq == std::string::npos || eq >= 128) return 2;
            llama_model_kv_override o = {};
            o.tag = LLAMA_KV_OVERRIDE_TYPE_BOOL;
            snprintf(o.key, sizeof(o.key), "%s", kv.substr(0, eq).c_str());
            o.val_bool = kv.substr(eq + 1) == "true";
            overrides.push_back(o);
        } else {
            args.push_back(a);
        }
    }
    if (args.size() < 2) return 2;
    overrides.push_back(llama_model_kv_override{});  // the terminator: an empty key

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    mp.kv_overrides = overrides.data();
    llama_model * model = llama_model_load_from_file(args[1].c_str(), mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", args[1].c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::string & cmd = args[0];

    if (cmd == "tokenize" && args.size() >= 5) {
        bool add_special = args[3] != "0";
        bool parse_special = args[4] != "0";
        std::ifstream in(args[2]);
        std::string line;
        while (std::getline(in, line)) {
            std::string text = from_hex(line);
            int n = -llama_tokenize(vocab, text.data(), (int) text.size(), nullptr, 0, add_special, parse_special);
            std::vector<llama_token> ids(std::max(n, 0));
            llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), n, add_special, parse_special);
            for (size_t i = 0; i < ids.size(); ++i) printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
        }
    } else if (cmd == "detokenize" && args.size() >= 3) {
        std::ifstream in(args[2]);
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
