//! The parts of llama.cpp's `src/unicode.cpp` the tokenizers use: code point
//! classes, lowercasing and NFD from llama.cpp's own tables, and GPT-2's
//! byte ↔ char map.

use crate::unicode_data::{CATEGORY_RANGES, LOWERCASE, NFD_RANGES, WHITESPACE};

// `unicode_cpt_flags` category bits, as the table stores them.
pub(crate) const NUMBER: u8 = 0x02;
pub(crate) const LETTER: u8 = 0x04;
pub(crate) const ACCENT_MARK: u8 = 0x10;
pub(crate) const PUNCTUATION: u8 = 0x20;
pub(crate) const SYMBOL: u8 = 0x40;
pub(crate) const CONTROL: u8 = 0x80;

/// llama.cpp's `unicode_cpt_flags` (the category and whitespace bits).
/// `Flags::default()` is its empty value, used past the end of a fragment.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Flags {
    category: u8,
    whitespace: bool,
}

impl Flags {
    /// `unicode_cpt_flags_from_cpt`.
    pub(crate) fn of_code_point(cp: u32) -> Flags {
        let i = CATEGORY_RANGES.partition_point(|&(start, _)| start <= cp) - 1;
        Flags {
            category: CATEGORY_RANGES[i].1,
            whitespace: WHITESPACE.binary_search(&cp).is_ok(),
        }
    }

    pub(crate) fn is_letter(self) -> bool {
        self.category & LETTER != 0
    }

    pub(crate) fn is_number(self) -> bool {
        self.category & NUMBER != 0
    }

    pub(crate) fn is_accent_mark(self) -> bool {
        self.category & ACCENT_MARK != 0
    }

    pub(crate) fn is_punctuation(self) -> bool {
        self.category & PUNCTUATION != 0
    }

    pub(crate) fn is_symbol(self) -> bool {
        self.category & SYMBOL != 0
    }

    pub(crate) fn is_control(self) -> bool {
        self.category & CONTROL != 0
    }

    /// `category_flag()`: the one category bit a code point has.
    pub(crate) fn category(self) -> u8 {
        self.category
    }

    pub(crate) fn is_whitespace(self) -> bool {
        self.whitespace
    }

    /// llama.cpp's `flags.as_uint() != 0`. Every code point has a category in
    /// its table (the generator checks), so this only fails past the end.
    pub(crate) fn is_set(self) -> bool {
        self != Flags::default()
    }
}

/// `unicode_tolower`: the table's lowercase, or the code point itself.
pub(crate) fn to_lower(cp: u32) -> u32 {
    LOWERCASE
        .binary_search_by_key(&cp, |&(from, _)| from)
        .map_or(cp, |i| LOWERCASE[i].1)
}

/// `unicode_cpts_normalize_nfd`: llama.cpp's "NFD" maps each code point to the
/// first code point of its decomposition (no marks are added).
pub(crate) fn nfd_first(cp: u32) -> u32 {
    let i = NFD_RANGES.partition_point(|&(first, _, _)| first <= cp);
    match i.checked_sub(1).map(|i| NFD_RANGES[i]) {
        Some((first, last, to)) if first <= cp && cp <= last => to,
        _ => cp,
    }
}

/// GPT-2's reversible byte ↔ printable char map (`unicode_byte_to_utf8` and
/// `unicode_utf8_to_byte`): printable Latin-1 bytes stand for themselves, the
/// rest take U+0100 onwards in byte order.
pub(crate) struct ByteLevel {
    to_char: [char; 256],
    to_byte: [Option<u8>; 0x144],
}

impl ByteLevel {
    pub(crate) fn new() -> ByteLevel {
        let mut to_char = ['\0'; 256];
        let mut to_byte = [None; 0x144];
        let mut next = 0x100;
        for byte in 0..=255u8 {
            let cp = if matches!(byte, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF) {
                u32::from(byte)
            } else {
                next += 1;
                next - 1
            };
            to_char[usize::from(byte)] = char::from_u32(cp).expect("below U+0144");
            to_byte[cp as usize] = Some(byte);
        }
        ByteLevel { to_char, to_byte }
    }

    pub(crate) fn encode(&self, bytes: &[u8], out: &mut String) {
        out.extend(bytes.iter().map(|&b| self.to_char[usize::from(b)]));
    }

    /// llama.cpp's `llama_decode_text`. A char outside the map is spelled out
    /// the way llama.cpp does, whole token text included.
    pub(crate) fn decode(&self, text: &str, out: &mut Vec<u8>) {
        for c in text.chars() {
            match self.to_byte.get(c as usize).copied().flatten() {
                Some(byte) => out.push(byte),
                None => {
                    out.extend_from_slice(b"[UNK_BYTE_0x");
                    let mut utf8 = [0u8; 4];
                    for b in c.encode_utf8(&mut utf8).bytes() {
                        out.extend_from_slice(format!("{b:02x}").as_bytes());
                    }
                    out.extend_from_slice(text.as_bytes());
                    out.push(b']');
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_llama_cpp_tables() {
        assert!(Flags::of_code_point(u32::from('a')).is_letter());
        assert!(Flags::of_code_point(u32::from('ß')).is_letter());
        assert!(Flags::of_code_point(u32::from('界')).is_letter());
        assert!(Flags::of_code_point(u32::from('7')).is_number());
        assert!(Flags::of_code_point(u32::from('٣')).is_number());
        assert!(Flags::of_code_point(u32::from(' ')).is_whitespace());
        assert!(Flags::of_code_point(u32::from('\u{3000}')).is_whitespace());
        // U+0301 COMBINING ACUTE ACCENT is a mark, not a letter.
        assert!(!Flags::of_code_point(u32::from('\u{301}')).is_letter());
        assert!(Flags::of_code_point(u32::from('\u{10FFFF}')).is_set());
        assert!(!Flags::default().is_set());
    }

    #[test]
    fn byte_map_matches_gpt2() {
        let map = ByteLevel::new();
        let mut text = String::new();
        map.encode(b" hi\n\xAD\xFF", &mut text);
        assert_eq!(text, "ĠhiĊŃÿ");
        let mut bytes = Vec::new();
        map.decode(&text, &mut bytes);
        assert_eq!(bytes, b" hi\n\xAD\xFF");
    }

    #[test]
    fn unmapped_chars_are_spelled_out_like_llama_cpp() {
        let mut bytes = Vec::new();
        ByteLevel::new().decode("a€", &mut bytes);
        assert_eq!(bytes, "a[UNK_BYTE_0xe282aca€]".as_bytes());
    }
}
