//! The parts of llama.cpp's `src/unicode.cpp` the tokenizers use: code point
//! classes, lowercasing and NFD from llama.cpp's own tables, and GPT-2's
//! byte ↔ char map.

use crate::unicode_data::{CATEGORY_RANGES, LOWERCASE, NFD_RANGES, WHITESPACE};

// `unicode_cpt_flags` category bits, as the table stores them.
const UNDEFINED: u8 = 0x01;
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
    /// `unicode_cpt_flags_from_cpt`: past U+10FFFF (which llama.cpp's UTF-8
    /// decoder can yield) a code point is undefined.
    pub(crate) fn of_code_point(cp: u32) -> Flags {
        if cp >= 0x110000 {
            return Flags {
                category: UNDEFINED,
                whitespace: false,
            };
        }
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

/// `unicode_len_utf8`: a sequence's length from its first byte (1 for a
/// stray continuation byte).
pub(crate) fn utf8_len(lead: u8) -> usize {
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4][usize::from(lead >> 4)]
}

/// `unicode_cpt_from_utf8`: the code point at the start of `bytes` and its
/// length, `None` where llama.cpp throws. Laxer than UTF-8: it takes
/// overlong forms, surrogates and leads up to 0xF7.
pub(crate) fn code_point_at(bytes: &[u8]) -> Option<(u32, usize)> {
    let lead = u32::from(*bytes.first()?);
    let (len, bits) = if lead & 0x80 == 0 {
        return Some((lead, 1));
    } else if lead & 0x40 == 0 {
        return None;
    } else if lead & 0x20 == 0 {
        (2, lead & 0x1F)
    } else if lead & 0x10 == 0 {
        (3, lead & 0x0F)
    } else if lead & 0x08 == 0 {
        (4, lead & 0x07)
    } else {
        return None;
    };
    let tail = bytes.get(1..len)?;
    let cp = tail.iter().try_fold(bits, |cp, &b| {
        (b & 0xC0 == 0x80).then_some((cp << 6) | u32::from(b & 0x3F))
    })?;
    Some((cp, len))
}

/// `unicode_cpts_from_utf8`: the code points of `bytes`, each byte that does
/// not start a sequence read as U+FFFD.
pub(crate) fn code_points(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match code_point_at(&bytes[at..]) {
            Some((cp, len)) => {
                out.push(cp);
                at += len;
            }
            None => {
                out.push(0xFFFD);
                at += 1;
            }
        }
    }
    out
}

/// `unicode_cpt_to_utf8`, surrogates included. llama.cpp throws past
/// U+10FFFF; such a code point (from a 0xF4–0xF7 lead) keeps the 4-byte form.
pub(crate) fn push_utf8(cp: u32, out: &mut Vec<u8>) {
    match cp {
        0..=0x7F => out.push(cp as u8),
        0x80..=0x7FF => out.extend([0xC0 | (cp >> 6) as u8, 0x80 | (cp & 0x3F) as u8]),
        0x800..=0xFFFF => out.extend([
            0xE0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
        _ => out.extend([
            0xF0 | ((cp >> 18) & 0x07) as u8,
            0x80 | ((cp >> 12) & 0x3F) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
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

    pub(crate) fn encode(&self, bytes: &[u8], out: &mut Vec<u8>) {
        for &b in bytes {
            let mut utf8 = [0; 4];
            out.extend_from_slice(self.to_char[usize::from(b)].encode_utf8(&mut utf8).as_bytes());
        }
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
    fn decodes_utf8_as_llama_cpp_does() {
        assert_eq!(code_points("aé😀".as_bytes()), [0x61, 0xE9, 0x1F600]);
        // Stray and truncated bytes are U+FFFD each; overlong forms and
        // surrogates decode.
        assert_eq!(code_points(b"\x80a\xE2\x82"), [0xFFFD, 0x61, 0xFFFD, 0xFFFD]);
        assert_eq!(code_points(b"\xC0\x80\xED\xA0\x80"), [0, 0xD800]);
        let mut bytes = Vec::new();
        push_utf8(0xD800, &mut bytes);
        assert_eq!(bytes, b"\xED\xA0\x80");
    }

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
        let mut text = Vec::new();
        map.encode(b" hi\n\xAD\xFF", &mut text);
        assert_eq!(text, "ĠhiĊŃÿ".as_bytes());
        let mut bytes = Vec::new();
        map.decode(std::str::from_utf8(&text).unwrap(), &mut bytes);
        assert_eq!(bytes, b" hi\n\xAD\xFF");
    }

    #[test]
    fn unmapped_chars_are_spelled_out_like_llama_cpp() {
        let mut bytes = Vec::new();
        ByteLevel::new().decode("a€", &mut bytes);
        assert_eq!(bytes, "a[UNK_BYTE_0xe282aca€]".as_bytes());
    }
}
