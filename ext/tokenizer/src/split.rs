//! llama.cpp's `unicode_regex_split`: a text is cut into words by a list of
//! patterns, each cutting the pieces the previous one left. Patterns llama.cpp
//! has a hand-written matcher for (`unicode_regex_split_custom_*`) are matched
//! by ports of those matchers; any other goes through [`Regex`], over the code
//! points or, when it names Unicode categories, over llama.cpp's "collapsed"
//! text, where every non-ASCII code point becomes a one-unit placeholder for
//! its category and `\p{..}` becomes a class of that placeholder.

use std::ops::Range;

use crate::regex::{PatternError, Regex};
use crate::unicode::{self, Flags};

/// `k_ucat_enum`: the category names a pattern may use, with their bits.
const CATEGORY_NAMES: [(&str, u8); 10] = [
    ("\\p{N}", unicode::NUMBER),
    ("\\p{L}", unicode::LETTER),
    ("\\p{P}", unicode::PUNCTUATION),
    ("\\p{M}", unicode::ACCENT_MARK),
    ("\\p{S}", unicode::SYMBOL),
    ("\\p{Lu}", unicode::LETTER),
    ("\\p{Ll}", unicode::LETTER),
    ("\\p{Lt}", unicode::LETTER),
    ("\\p{Lm}", unicode::LETTER),
    ("\\p{Lo}", unicode::LETTER),
];

/// `k_ucat_cpt` and `k_ucat_map`: each category's placeholder unit and the
/// ASCII members that stay themselves in the collapsed text.
const CATEGORY_CLASSES: [(u8, u32, &str); 5] = [
    (unicode::NUMBER, 0xD1, "0-9"),
    (unicode::LETTER, 0xD2, "A-Za-z"),
    (unicode::PUNCTUATION, 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"),
    (unicode::ACCENT_MARK, 0xD4, ""),
    (unicode::SYMBOL, 0xD5, "\\$\\+<->^`\\|\\~"),
];
/// The placeholder of a code point in no category above.
const OTHER: u32 = 0xD0;
/// What non-ASCII whitespace becomes for `std::regex`'s ASCII `\s`.
const VERTICAL_TAB: u32 = 0x0B;

pub(crate) struct Splitter {
    patterns: Vec<Pattern>,
}

enum Pattern {
    /// `unicode_regex_split_custom_gpt2`.
    Gpt2,
    /// `_llama3` (`max_digits` 3) and `_qwen2` (1).
    Llama3 { max_digits: usize },
    /// `_qwen35`: `_qwen2` with marks in words.
    Qwen35,
    /// `_kimi_k2`.
    KimiK2,
    /// `_afmoe`: digit runs in threes from the right.
    Afmoe,
    /// `_newlines`: `[^\n]+|[\n]+`.
    Newlines,
    /// `unicode_regex_split_stl`, on the collapsed text or on the code points.
    General { regex: Regex, collapsed: bool },
}

impl Splitter {
    pub(crate) fn new(patterns: &[&str]) -> Result<Splitter, PatternError> {
        let patterns = patterns.iter().map(|p| Pattern::new(p)).collect::<Result<_, _>>()?;
        Ok(Splitter { patterns })
    }

    /// The words of the code points `cpts`, as ranges of them.
    pub(crate) fn split(&self, cpts: &[u32]) -> Vec<Range<usize>> {
        let flags: Vec<Flags> = cpts.iter().map(|&c| Flags::of_code_point(c)).collect();
        let uses = |collapsed: bool| {
            self.patterns
                .iter()
                .any(|p| matches!(p, Pattern::General { collapsed: c, .. } if *c == collapsed))
        };
        let collapsed = if uses(true) { collapse(cpts, &flags) } else { Vec::new() };
        let wide = if uses(false) { widen(cpts, &flags) } else { Vec::new() };

        let mut lengths = vec![cpts.len()];
        for pattern in &self.patterns {
            let mut next = Vec::with_capacity(lengths.len());
            let mut start = 0;
            for &length in &lengths {
                let range = start..start + length;
                start += length;
                let fragment = Fragment {
                    cpts: &cpts[range.clone()],
                    flags: &flags[range.clone()],
                };
                match pattern {
                    Pattern::Gpt2 => fragment.gpt2(&mut next),
                    Pattern::Llama3 { max_digits } => fragment.llama3(*max_digits, &mut next),
                    Pattern::Qwen35 => fragment.qwen35(&mut next),
                    Pattern::KimiK2 => fragment.kimi_k2(&mut next),
                    Pattern::Afmoe => fragment.afmoe(&mut next),
                    Pattern::Newlines => fragment.newlines(&mut next),
                    Pattern::General { regex, collapsed: true } => regex.split(&collapsed[range], &mut next),
                    Pattern::General {
                        regex,
                        collapsed: false,
                    } => regex.split(&wide[range], &mut next),
                }
            }
            lengths = next;
        }

        let mut start = 0;
        lengths
            .into_iter()
            .map(|length| {
                start += length;
                start - length..start
            })
            .collect()
    }
}

impl Pattern {
    /// `unicode_regex_split_custom`'s dispatch on the exact pattern text, then
    /// the general path.
    fn new(expr: &str) -> Result<Pattern, PatternError> {
        const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
        const LLAMA3: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        const LLAMA3_ADAPTED: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        Ok(match expr {
            GPT2 => Pattern::Gpt2,
            LLAMA3 | LLAMA3_ADAPTED => Pattern::Llama3 { max_digits: 3 },
            QWEN2 => Pattern::Llama3 { max_digits: 1 },
            QWEN35 => Pattern::Qwen35,
            "\\p{Han}+" => Pattern::KimiK2,
            // tiny_aya's `\d{1,3}(?=(?:\d{3})*\b)` goes to the same matcher there.
            "\\p{AFMoE_digits}" | "\\d{1,3}(?=(?:\\d{3})*\\b)" => Pattern::Afmoe,
            "[^\\n]+|[\\n]+" => Pattern::Newlines,
            _ => {
                let collapsed = CATEGORY_NAMES.iter().any(|(name, _)| expr.contains(name));
                let units = if collapsed {
                    collapse_pattern(expr)?
                } else {
                    expr.chars().map(u32::from).collect()
                };
                Pattern::General {
                    regex: Regex::new(&units)?,
                    collapsed,
                }
            }
        })
    }
}

/// The collapsed text: ASCII stays, non-ASCII whitespace becomes a vertical
/// tab, anything else its category's placeholder.
fn collapse(cpts: &[u32], flags: &[Flags]) -> Vec<u32> {
    cpts.iter()
        .zip(flags)
        .map(|(&cpt, f)| {
            if cpt < 128 {
                cpt
            } else if f.is_whitespace() {
                VERTICAL_TAB
            } else {
                CATEGORY_CLASSES
                    .iter()
                    .find(|&&(category, _, _)| f.category() == category)
                    .map_or(OTHER, |&(_, placeholder, _)| placeholder)
            }
        })
        .collect()
}

/// The code points as `std::wregex` gets them: non-ASCII whitespace becomes a
/// vertical tab, since its `\s` only knows ASCII.
fn widen(cpts: &[u32], flags: &[Flags]) -> Vec<u32> {
    cpts.iter()
        .zip(flags)
        .map(|(&cpt, f)| {
            if cpt > 0x7F && f.is_whitespace() {
                VERTICAL_TAB
            } else {
                cpt
            }
        })
        .collect()
}

/// The pattern over the collapsed text: each `\p{..}` becomes its placeholder
/// and ASCII members, bracketed unless already inside a class. A pattern that
/// also holds non-ASCII text cannot be collapsed (llama.cpp throws).
fn collapse_pattern(expr: &str) -> Result<Vec<u32>, PatternError> {
    if !expr.is_ascii() {
        return Err(PatternError(format!(
            "{expr:?} holds both Unicode categories and non-ASCII characters"
        )));
    }
    let bytes = expr.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut inside = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'[' && (i == 0 || bytes[i - 1] != b'\\') {
            out.push(u32::from(c));
            inside = true;
            i += 1;
            continue;
        }
        if inside && c == b']' && bytes[i - 1] != b'\\' {
            out.push(u32::from(c));
            inside = false;
            i += 1;
            continue;
        }
        if c == b'\\' && i + 3 < bytes.len() && bytes[i + 1] == b'p' && bytes[i + 2] == b'{' {
            if let Some(close) = expr[i + 3..]
                .find('}')
                .map(|p| p + i + 3)
                .filter(|&close| close <= i + 10)
            {
                if let Some(&(_, category)) = CATEGORY_NAMES.iter().find(|(name, _)| *name == &expr[i..=close]) {
                    let &(_, placeholder, members) = CATEGORY_CLASSES
                        .iter()
                        .find(|&&(c, _, _)| c == category)
                        .expect("every named category has a class");
                    if !inside {
                        out.push(u32::from(b'['));
                    }
                    out.push(placeholder);
                    out.extend(members.bytes().map(u32::from));
                    if !inside {
                        out.push(u32::from(b']'));
                    }
                    i = close + 1;
                    continue;
                }
            }
        }
        out.push(u32::from(c));
        i += 1;
    }
    Ok(out)
}

/// One piece of the text, as the custom matchers see it: nothing exists
/// outside it (`OUT_OF_RANGE`, empty flags).
struct Fragment<'a> {
    cpts: &'a [u32],
    flags: &'a [Flags],
}

/// Where the word being matched started, for `_add_token`.
struct Words<'a> {
    out: &'a mut Vec<usize>,
    prev_end: usize,
}

impl Words<'_> {
    /// `_add_token`: ends the word at `end`; returns its length (empty words
    /// are not kept).
    fn add(&mut self, end: usize) -> usize {
        let length = end - self.prev_end;
        if length > 0 {
            self.out.push(length);
        }
        self.prev_end = end;
        length
    }
}

fn is_newline(cpt: Option<u32>) -> bool {
    matches!(cpt, Some(0x0D | 0x0A))
}

impl Fragment<'_> {
    fn cpt(&self, pos: usize) -> Option<u32> {
        self.cpts.get(pos).copied()
    }

    fn flag(&self, pos: usize) -> Flags {
        self.flags.get(pos).copied().unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.cpts.len()
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: the contraction's length.
    fn contraction(&self, pos: usize, lower: bool) -> Option<usize> {
        if self.cpt(pos) != Some(u32::from('\'')) || pos + 1 >= self.len() {
            return None;
        }
        let letter = |p: usize| {
            self.cpt(p)
                .map(|c| if lower { unicode::to_lower(c) } else { c })
                .and_then(char::from_u32)
        };
        if matches!(letter(pos + 1), Some('s' | 't' | 'm' | 'd')) {
            return Some(2);
        }
        if pos + 2 < self.len()
            && matches!(
                (letter(pos + 1), letter(pos + 2)),
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            )
        {
            return Some(3);
        }
        None
    }

    /// The whitespace run at `pos`: its length and where its last `\r`/`\n` ends.
    fn whitespace_run(&self, pos: usize) -> (usize, Option<usize>) {
        let mut count = 0;
        let mut last_newline_end = None;
        while self.flag(pos + count).is_whitespace() {
            if is_newline(self.cpt(pos + count)) {
                last_newline_end = Some(pos + count + 1);
            }
            count += 1;
        }
        (count, last_newline_end)
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` and the no-match step, shared by the
    /// llama3-like matchers: where the word at `pos` ends.
    fn whitespace_word(&self, pos: usize, newlines: bool) -> usize {
        let (count, last_newline_end) = self.whitespace_run(pos);
        match last_newline_end {
            Some(end) if newlines => end,
            _ if count > 1 && pos + count < self.len() => pos + count - 1,
            _ if count > 0 => pos + count,
            _ => pos + 1,
        }
    }

    /// `unicode_regex_split_custom_gpt2`:
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    fn gpt2(&self, out: &mut Vec<usize>) {
        let mut words = Words { out, prev_end: 0 };
        let mut pos = 0;
        while pos < self.len() {
            if let Some(n) = self.contraction(pos, false) {
                pos += words.add(pos + n);
                continue;
            }
            let space = self.cpt(pos) == Some(u32::from(' '));
            let mut f2 = if space { self.flag(pos + 1) } else { self.flag(pos) };
            let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.is_set();
            let class: Option<&dyn Fn(Flags) -> bool> = if f2.is_letter() {
                Some(&Flags::is_letter)
            } else if f2.is_number() {
                Some(&Flags::is_number)
            } else if other(f2) {
                Some(&other)
            } else {
                None
            };
            if let Some(class) = class {
                pos += usize::from(space);
                while class(f2) {
                    pos += 1;
                    f2 = self.flag(pos);
                }
                words.add(pos);
                continue;
            }
            // Here the pattern has no `\s*[\r\n]+`.
            pos = self.whitespace_word(pos, false);
            words.add(pos);
        }
    }

    /// `unicode_regex_split_custom_llama3` (`max_digits` 3) and `_qwen2` (1):
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    fn llama3(&self, max_digits: usize, out: &mut Vec<usize>) {
        self.llama3_like(out, |f| f.is_letter(), |f| f.is_letter() || f.is_number(), max_digits);
    }

    /// `unicode_regex_split_custom_qwen35`: `_qwen2` with `[\p{L}\p{M}]+` words
    /// and no marks in the punctuation run.
    fn qwen35(&self, out: &mut Vec<usize>) {
        let letter = |f: Flags| f.is_letter() || f.is_accent_mark();
        self.llama3_like(out, letter, |f| letter(f) || f.is_number(), 1);
    }

    fn llama3_like(
        &self,
        out: &mut Vec<usize>,
        letter: impl Fn(Flags) -> bool,
        word_like: impl Fn(Flags) -> bool,
        max_digits: usize,
    ) {
        let mut words = Words { out, prev_end: 0 };
        let mut pos = 0;
        while pos < self.len() {
            let cpt = self.cpt(pos);
            let f = self.flag(pos);
            if let Some(n) = self.contraction(pos, true) {
                pos += words.add(pos + n);
                continue;
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(is_newline(cpt) || f.is_number()) && (letter(f) || letter(self.flag(pos + 1))) {
                pos += 1;
                while letter(self.flag(pos)) {
                    pos += 1;
                }
                words.add(pos);
                continue;
            }
            // \p{N}{1,max_digits}
            if f.is_number() {
                let mut start = pos;
                while self.flag(pos).is_number() {
                    pos += 1;
                    if pos - start >= max_digits {
                        words.add(pos);
                        start = pos;
                    }
                }
                words.add(pos);
                continue;
            }
            // <space>?[^\s\p{L}\p{N}]+[\r\n]*
            let space = cpt == Some(u32::from(' '));
            let mut f2 = if space { self.flag(pos + 1) } else { f };
            if !(f2.is_whitespace() || word_like(f2)) && f.is_set() {
                pos += usize::from(space);
                while !(f2.is_whitespace() || word_like(f2)) && f2.is_set() {
                    pos += 1;
                    f2 = self.flag(pos);
                }
                while is_newline(self.cpt(pos)) {
                    pos += 1;
                }
                words.add(pos);
                continue;
            }
            pos = self.whitespace_word(pos, true);
            words.add(pos);
        }
    }

    /// `unicode_regex_split_custom_kimi_k2`.
    fn kimi_k2(&self, out: &mut Vec<usize>) {
        let han = |cpt: Option<u32>| cpt.is_some_and(is_han);
        let letter_not_han = |pos: usize| self.flag(pos).is_letter() && !han(self.cpt(pos));
        let mut words = Words { out, prev_end: 0 };
        let mut pos = 0;
        while pos < self.len() {
            let cpt = self.cpt(pos);
            let f = self.flag(pos);
            // [\p{Han}]+
            if han(cpt) {
                while han(self.cpt(pos)) {
                    pos += 1;
                }
                words.add(pos);
                continue;
            }
            // Letter words without Han, an optional leading char, an optional contraction.
            let may_lead = !(is_newline(cpt) || f.is_letter() || f.is_number());
            if letter_not_han(pos) || (may_lead && letter_not_han(pos + 1)) {
                let leading = may_lead;
                if leading {
                    pos += 1;
                }
                let mut has_letters = false;
                while letter_not_han(pos) {
                    has_letters = true;
                    pos += 1;
                }
                if has_letters || (!leading && letter_not_han(pos)) {
                    if !has_letters {
                        pos += 1;
                    }
                    while letter_not_han(pos) {
                        pos += 1;
                    }
                    if let Some(n) = self.contraction(pos, true) {
                        pos += n;
                    }
                    words.add(pos);
                    continue;
                } else if leading {
                    pos -= 1;
                }
            }
            // \p{N}{1,3}
            if f.is_number() {
                let mut start = pos;
                while self.flag(pos).is_number() {
                    pos += 1;
                    if pos - start >= 3 {
                        words.add(pos);
                        start = pos;
                    }
                }
                words.add(pos);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
            let space = cpt == Some(u32::from(' '));
            let mut f2 = if space { self.flag(pos + 1) } else { f };
            let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.is_set();
            if other(f2) {
                pos += usize::from(space);
                while other(f2) {
                    pos += 1;
                    f2 = self.flag(pos);
                }
                while is_newline(self.cpt(pos)) {
                    pos += 1;
                }
                words.add(pos);
                continue;
            }
            pos = self.whitespace_word(pos, true);
            words.add(pos);
        }
    }

    /// `unicode_regex_split_custom_afmoe`: each digit run split in threes from
    /// the right; everything else is left in the pieces between.
    fn afmoe(&self, out: &mut Vec<usize>) {
        let mut words = Words { out, prev_end: 0 };
        let mut pos = 0;
        while pos < self.len() {
            if !self.flag(pos).is_number() {
                pos += 1;
                continue;
            }
            let start = pos;
            while pos < self.len() && self.flag(pos).is_number() {
                pos += 1;
            }
            let mut current = start;
            let remainder = (pos - start) % 3;
            if remainder > 0 {
                current += remainder;
                words.add(current);
            }
            while current < pos {
                current += 3;
                words.add(current);
            }
        }
        if words.prev_end < self.len() {
            words.add(self.len());
        }
    }

    /// `unicode_regex_split_custom_newlines`: runs of `\n` and runs of the rest.
    fn newlines(&self, out: &mut Vec<usize>) {
        let mut pos = 0;
        while pos < self.len() {
            let newline = self.cpts[pos] == u32::from('\n');
            let start = pos;
            while pos < self.len() && (self.cpts[pos] == u32::from('\n')) == newline {
                pos += 1;
            }
            out.push(pos - start);
        }
    }
}

/// `unicode_cpt_is_han`.
fn is_han(cpt: u32) -> bool {
    matches!(cpt,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0x2CEB0..=0x2EBEF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::Splitter;

    fn words(patterns: &[&str], text: &str) -> Vec<String> {
        let splitter = Splitter::new(patterns).unwrap();
        let cpts: Vec<u32> = text.chars().map(u32::from).collect();
        let chars: Vec<char> = text.chars().collect();
        splitter
            .split(&cpts)
            .into_iter()
            .map(|r| chars[r].iter().collect())
            .collect()
    }

    const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

    #[test]
    fn qwen2_split_follows_llama_cpp() {
        let split = |text| words(&[QWEN2], text);
        assert_eq!(split("Hello world"), ["Hello", " world"]);
        assert_eq!(split("I'M here, they'Ll"), ["I", "'M", " here", ",", " they", "'Ll"]);
        assert_eq!(split("x  = 12"), ["x", " ", " =", " ", "1", "2"]);
        assert_eq!(split("a \n\n b"), ["a", " \n\n", " b"]);
        assert_eq!(split("end   "), ["end", "   "]);
        assert_eq!(split("\tif"), ["\tif"]);
        assert_eq!(split("e\u{301}t"), ["e", "\u{301}t"]);
        assert_eq!(split("e\u{301}\u{302} x"), ["e", "\u{301}\u{302}", " x"]);
        assert_eq!(split("'"), ["'"]);
        assert_eq!(split("?!\r\nok"), ["?!\r\n", "ok"]);
        assert!(split("").is_empty());
    }

    #[test]
    fn patterns_cut_what_the_previous_ones_left() {
        // starcoder: digits alone first, then GPT-2's words.
        let gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
        assert_eq!(words(&["\\p{N}", gpt2], "ab 123 é"), ["ab", " ", "1", "2", "3", " é"]);
    }

    #[test]
    fn categories_collapse_to_placeholders() {
        assert_eq!(words(&["\\s?\\p{L}+"], "héllo wörld!"), ["héllo", " wörld", "!"]);
        assert_eq!(words(&["\\p{N}+"], "x٣٤y"), ["x", "٣٤", "y"]);
    }

    #[test]
    fn afmoe_groups_digits_from_the_right() {
        // The text before a digit run joins its first group, as llama.cpp's
        // `_add_token` ends the pending word there.
        assert_eq!(words(&["\\p{AFMoE_digits}"], "a1234567b"), ["a1", "234", "567", "b"]);
        assert_eq!(words(&["\\p{AFMoE_digits}"], "x123y45"), ["x123", "y45"]);
    }
}
