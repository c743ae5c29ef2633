//! `Elelem::Tokenizer`: a vocabulary's tokenizer, from a vocab-only GGUF or from
//! a model. Immutable and shared (`Arc`), so it needs no lock: any thread may use
//! it while its model generates. lib/elelem/tokenizer.rb validates arguments and
//! documents the Ruby API.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use elelem_engine as engine;
use magnus::{function, method, prelude::*, Error, RArray, RModule, RString, Ruby};

use super::errors::engine_error;
use super::nogvl::without_gvl;

#[magnus::wrap(class = "Elelem::Tokenizer", free_immediately, size)]
pub struct Tokenizer(pub Arc<engine::Tokenizer>);

impl Tokenizer {
    /// `path` is taken as bytes: file names need not be UTF-8.
    fn open(ruby: &Ruby, path: RString) -> Result<Tokenizer, Error> {
        // SAFETY: copied at once, before any Ruby code can run.
        let path = PathBuf::from(OsStr::from_bytes(unsafe { path.as_slice() }));
        let never = AtomicBool::new(false);
        let tokenizer =
            without_gvl(ruby, &never, || engine::open_tokenizer(&path))?.map_err(|e| engine_error(ruby, e))?;
        Ok(Tokenizer(Arc::new(tokenizer)))
    }

    fn tokenize(ruby: &Ruby, rb_self: &Self, text: String, add_special: bool, parse_special: bool) -> RArray {
        ruby.ary_from_vec(rb_self.0.tokenize(&text, add_special, parse_special))
    }

    /// Ids are checked on the Ruby side (against `n_vocab`).
    fn detokenize(&self, ids: Vec<u32>, special: bool) -> String {
        String::from_utf8_lossy(&self.0.detokenize(&ids, special)).into_owned()
    }

    /// A token's bytes: a piece may hold part of a character, so the String is binary.
    fn token_to_piece(ruby: &Ruby, rb_self: &Self, id: u32, special: bool) -> RString {
        ruby.str_from_slice(rb_self.0.token_to_piece(id, special))
    }

    fn n_vocab(&self) -> usize {
        self.0.n_vocab()
    }

    fn bos(&self) -> Option<u32> {
        self.0.bos()
    }

    fn eos(&self) -> Option<u32> {
        self.0.eos()
    }

    fn sep(&self) -> Option<u32> {
        self.0.sep()
    }

    /// The ids of a rerank pair as llama-server's `format_prompt_rerank` lays them out
    /// for a model without a rerank template: BOS, the query, EOS and SEP where the
    /// vocabulary asks for them, the document, EOS where asked.
    fn rerank_ids(&self, query: String, document: String) -> Vec<u32> {
        let t = &self.0;
        let eos = t.eos().or(t.sep());
        let mut ids = Vec::new();
        ids.extend(t.bos().filter(|_| t.add_bos()));
        ids.extend(t.tokenize(&query, false, false));
        ids.extend(eos.filter(|_| t.add_eos_flag()));
        ids.extend(t.sep().filter(|_| t.add_sep()));
        ids.extend(t.tokenize(&document, false, false));
        ids.extend(eos.filter(|_| t.add_eos_flag()));
        ids
    }

    /// `[pre, suf, mid, rep, sep]`, each an id or nil.
    fn fim(&self) -> Vec<Option<u32>> {
        let f = self.0.fim();
        vec![f.pre, f.suf, f.mid, f.rep, f.sep]
    }

    fn add_bos(&self) -> bool {
        self.0.add_bos()
    }

    fn add_eos(&self) -> bool {
        self.0.add_eos()
    }

    fn model(&self) -> String {
        self.0.model_name().to_string()
    }

    fn pre(&self) -> Option<String> {
        self.0.pre_name().map(str::to_string)
    }

    fn is_eog(&self, id: u32) -> bool {
        self.0.is_eog(id)
    }
}

pub fn init(ruby: &Ruby, elelem: &RModule) -> Result<(), Error> {
    let class = elelem.define_class("Tokenizer", ruby.class_object())?;
    class
        .singleton_class()?
        .define_private_method("_open", function!(Tokenizer::open, 1))?;
    class.define_private_method("_tokenize", method!(Tokenizer::tokenize, 3))?;
    class.define_private_method("_detokenize", method!(Tokenizer::detokenize, 2))?;
    class.define_private_method("_token_to_piece", method!(Tokenizer::token_to_piece, 2))?;
    class.define_method("n_vocab", method!(Tokenizer::n_vocab, 0))?;
    class.define_method("bos", method!(Tokenizer::bos, 0))?;
    class.define_method("eos", method!(Tokenizer::eos, 0))?;
    class.define_method("add_bos?", method!(Tokenizer::add_bos, 0))?;
    class.define_method("sep", method!(Tokenizer::sep, 0))?;
    class.define_private_method("_rerank_ids", method!(Tokenizer::rerank_ids, 2))?;
    class.define_method("add_eos?", method!(Tokenizer::add_eos, 0))?;
    class.define_method("model", method!(Tokenizer::model, 0))?;
    class.define_method("pre", method!(Tokenizer::pre, 0))?;
    class.define_private_method("_eog?", method!(Tokenizer::is_eog, 1))?;
    class.define_private_method("_fim", method!(Tokenizer::fim, 0))?;
    Ok(())
}
