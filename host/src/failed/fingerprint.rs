//! The fingerprint of a parked message's cause: its `worker-error` with what varies from one
//! message to the next (numbers, ids, UUIDs, hex, quoted values) masked as `*`, so that two
//! thousand duplicate keys with as many key values make one failure group, not two thousand;
//! and the id of a group, over the fingerprint and the plugin version.

use sha2::{Digest, Sha256};

use super::parked::Parked;

/// Characters of a fingerprint kept: causes can be long (a plugin's whole report), and the
/// start tells them apart.
const MAX_CHARS: usize = 500;

/// Hex characters a token needs (with one digit at least) to be taken for a hash or an id.
const HEX_ID: usize = 8;

/// The cause with its varying parts masked: every quoted value (`"..."`, `'...'`, `` `...` ``)
/// becomes `"*"`, every UUID, `0x` number and run of 8 or more hex characters with a digit
/// `*`, and every other run of digits `*`; at most 500 characters.
pub(crate) fn fingerprint(cause: &str) -> String {
    let mut out = String::with_capacity(cause.len().min(MAX_CHARS));
    let chars: Vec<char> = cause.chars().collect();
    let mut i = 0;
    // Bytes bound the loop (a char is at most 4); the cut to MAX_CHARS chars comes last.
    while i < chars.len() && out.len() < MAX_CHARS * 4 {
        let c = chars[i];
        if let Some(end) = quoted_end(&chars, i) {
            out.push(c);
            out.push('*');
            out.push(c);
            i = end + 1;
        } else if is_word(c) {
            let start = i;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
            let token: String = chars[start..i].iter().collect();
            mask_token(&token, &mut out);
        } else {
            out.push(c);
            i += 1;
        }
    }
    out.chars().take(MAX_CHARS).collect()
}

/// Letters, digits, `_` and `-`: the characters of identifiers, numbers and UUIDs.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Where the quoted value opening at `i` closes, if a quote opens one there: a `"` always
/// (backslash escapes skipped), a `'` or `` ` `` only after no letter or digit, so the
/// apostrophe of "can't" opens nothing.
fn quoted_end(chars: &[char], i: usize) -> Option<usize> {
    let quote = chars[i];
    if !matches!(quote, '"' | '\'' | '`') {
        return None;
    }
    if quote != '"' && i > 0 && chars[i - 1].is_alphanumeric() {
        return None;
    }
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            c if c == quote => {
                let after = chars.get(j + 1).copied();
                if quote != '"' && after.is_some_and(char::is_alphanumeric) {
                    j += 1;
                    continue;
                }
                return Some(j);
            }
            _ => j += 1,
        }
    }
    None
}

/// Writes `token` masked: whole when it is an id (UUID, `0x` number, long hex), else each run
/// of digits.
fn mask_token(token: &str, out: &mut String) {
    if is_uuid(token) || is_hex_id(token) {
        out.push('*');
        return;
    }
    let mut in_digits = false;
    for c in token.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
}

fn is_uuid(token: &str) -> bool {
    let parts: Vec<&str> = token.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    parts.len() == lens.len()
        && parts
            .iter()
            .zip(lens)
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_hex_id(token: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    if let Some(rest) = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))
    {
        return hex(rest);
    }
    token.len() >= HEX_ID && hex(token) && token.chars().any(|c| c.is_ascii_digit())
}

/// Hex characters of a group id.
const ID_HEX: usize = 16;

/// The id of the group of `parked`: `g-` and 16 hex of SHA-256 over the fingerprint of its
/// cause and its plugin version, so the same cause of the same build has one id in every queue
/// and on every listing.
pub(crate) fn id_of(parked: &Parked) -> String {
    let print = fingerprint(parked.cause.as_deref().unwrap_or_default());
    id(
        &print,
        parked.plugin.as_deref(),
        parked.plugin_sha256.as_deref(),
    )
}

fn id(print: &str, plugin: Option<&str>, sha: Option<&str>) -> String {
    let mut hasher = Sha256::new();
    for part in [Some(print), plugin, sha] {
        hasher.update(part.unwrap_or_default().as_bytes());
        hasher.update([0]);
    }
    let hex = hex::encode(hasher.finalize());
    format!("g-{}", &hex[..ID_HEX])
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn the_issue_example_is_masked() {
        let cause = r#"sql error: constraint: duplicate key value violates unique constraint "orders_pkey" (id=4711)"#;
        assert_eq!(
            fingerprint(cause),
            r#"sql error: constraint: duplicate key value violates unique constraint "*" (id=*)"#
        );
        let other = r#"sql error: constraint: duplicate key value violates unique constraint "users_pkey" (id=12)"#;
        assert_eq!(fingerprint(cause), fingerprint(other));
    }

    #[test]
    fn numbers_ids_uuids_and_hex_are_masked() {
        assert_eq!(fingerprint("timeout after 8s"), "timeout after *s");
        assert_eq!(fingerprint("order 4711 of 3.5"), "order * of *.*");
        assert_eq!(
            fingerprint("message 7f3c0d1e-2b4a-4c6d-8e9f-001122334455 lost"),
            "message * lost"
        );
        assert_eq!(fingerprint("at 0xdeadBEEF, sha 7f3c0d1e9a"), "at *, sha *");
        assert_eq!(fingerprint("customer c-17 unknown"), "customer c-* unknown");
        // Words stay, hex-looking or not.
        assert_eq!(fingerprint("deadbeef cafe"), "deadbeef cafe");
    }

    #[test]
    fn quoted_values_are_masked_but_apostrophes_are_not_quotes() {
        assert_eq!(fingerprint(r#"key "a \" b" missing"#), r#"key "*" missing"#);
        assert_eq!(
            fingerprint("can't reach 'db-1' or `x`"),
            "can't reach '*' or `*`"
        );
        assert_eq!(fingerprint(r#"open "quote"#), r#"open "quote"#);
    }

    #[test]
    fn a_long_cause_is_cut() {
        let long = "word ".repeat(400);
        assert_eq!(fingerprint(&long).chars().count(), 500);
        assert_eq!(fingerprint(""), "");
    }
}
