//! What `/readyz` says about a store or database that is down. Anyone who reaches the admin
//! listener reads it, so it names the store (`sql.orders`) and the kind of trouble, never where
//! the store is or as whom the host logs in: those stay in the log.

use crate::config::Secret;

/// Stands for what `/readyz` does not show.
const ELIDED: &str = "…";

/// `why` as `/readyz` shows it to anyone who reaches the admin listener: what the driver or
/// server quotes (`user "u"`, `database 'db'`, `host '10.0.0.5'`) and every word of the store's
/// URL (`hidden`: host, user, database, password) replaced by `…`. What stays says what went
/// wrong (connection refused, authentication failed, timed out), not where or as whom; the
/// log has the rest.
pub(super) fn public_reason(why: &str, hidden: &[String]) -> String {
    hidden
        .iter()
        .filter(|w| !w.is_empty())
        .fold(unquoted(why), |text, word| without_word(&text, word))
}

/// `why` with every word of `url` elided, for a message that is bound for `/readyz`.
pub(super) fn without_url(why: &str, url: &Secret) -> String {
    url.url_words()
        .iter()
        .filter(|w| !w.is_empty())
        .fold(why.to_string(), |text, word| without_word(&text, word))
}

/// `text` with the inside of each quoted part replaced by `…`. A `'` only opens a quote after a
/// letter-less position (so `can't` stays) and only closes one before one; an unclosed quote
/// hides the rest.
fn unquoted(text: &str) -> String {
    const PAIRS: [(char, char); 6] = [
        ('"', '"'),
        ('\'', '\''),
        ('\u{201c}', '\u{201d}'),
        ('\u{2018}', '\u{2019}'),
        ('\u{ab}', '\u{bb}'),
        ('\u{201e}', '\u{201c}'),
    ];
    let word_char = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric());
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut before = None;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        let close = PAIRS
            .iter()
            .find(|(open, _)| *open == c && !(c == '\'' && word_char(before)))
            .map(|(_, close)| *close);
        before = Some(c);
        out.push(c);
        let Some(close) = close else { continue };
        let end = rest.char_indices().find(|&(i, d)| {
            d == close && !(d == '\'' && word_char(rest[i + d.len_utf8()..].chars().next()))
        });
        out.push_str(ELIDED);
        match end {
            Some((i, d)) => {
                out.push(d);
                rest = &rest[i + d.len_utf8()..];
                before = Some(d);
            }
            None => return out,
        }
    }
    out
}

/// `text` with every whole-word occurrence of `word` (ASCII case ignored) replaced by `…`.
fn without_word(text: &str, word: &str) -> String {
    let word_char = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let lower = text.to_ascii_lowercase();
    let needle = word.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    while let Some(found) = lower[from..].find(&needle) {
        let (start, end) = (from + found, from + found + needle.len());
        // ASCII lowercasing keeps every byte offset, so these are char boundaries of `text`.
        let whole =
            !word_char(text[..start].chars().next_back()) && !word_char(text[end..].chars().next());
        out.push_str(&text[from..start]);
        out.push_str(if whole { ELIDED } else { &text[start..end] });
        from = end;
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hidden(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn what_servers_quote_is_elided() {
        let cases = [
            (
                "password authentication failed for user \"orders_user\"",
                "password authentication failed for user \"…\"",
            ),
            (
                "no pg_hba.conf entry for host \"10.0.0.5\", user \"u\", database \"db\", no encryption",
                "no pg_hba.conf entry for host \"…\", user \"…\", database \"…\", no encryption",
            ),
            (
                "Access denied for user 'root'@'10.0.0.5' (using password: YES)",
                "Access denied for user '…'@'…' (using password: YES)",
            ),
            (
                "Can't connect to MySQL server on 'db.internal' (111)",
                "Can't connect to MySQL server on '…' (111)",
            ),
            (
                "database \u{201c}orders\u{201d} n'existe pas",
                "database \u{201c}…\u{201d} n'existe pas",
            ),
            ("an unclosed \"quote runs to the end", "an unclosed \"…"),
            (
                "connection failed: Connection refused (os error 111)",
                "connection failed: Connection refused (os error 111)",
            ),
            ("", ""),
            ("'", "'…"),
        ];
        for (why, shown) in cases {
            assert_eq!(public_reason(why, &[]), shown, "{why}");
        }
    }

    #[test]
    fn the_urls_words_are_elided_as_whole_words() {
        let words = hidden(&["db.internal", "orders", "S3CRET", "u"]);
        assert_eq!(
            public_reason(
                "cannot reach DB.internal:5432 for orders (S3CRET, u)",
                &words
            ),
            "cannot reach …:5432 for … (…, …)"
        );
        // Inside other words they stay: `orders` in `reorders`, `u` in `unavailable`.
        assert_eq!(
            public_reason("reorders unavailable", &words),
            "reorders unavailable"
        );
    }
}
