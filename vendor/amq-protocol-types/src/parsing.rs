use crate::{flags::*, types::*, value::*};
use nom::{
    self, Parser,
    bytes::streaming::take,
    combinator::{flat_map, map},
    error::{ContextError, ErrorKind, ParseError, context},
    number::streaming::{
        be_f32, be_f64, be_i16, be_i32, be_i64, be_u16, be_u32, be_u64, i8 as be_i8, u8 as be_u8,
    },
    sequence::pair,
};
use std::{error, fmt};
use traits::*;

/// Error context for `ParserErrors`
#[derive(Clone, Debug, Eq, PartialEq)]
enum VerboseErrorKind {
    /// Static string added by the `context` function
    Context(&'static str),
    /// Indicates which character was expected by the `char` function
    Char(char),
    /// Error kind given by various nom parsers
    Nom(ErrorKind),
    /// Why a value could not be decoded
    Cause(ParseCause),
}

/// The deepest nesting of field tables and arrays the parsers accept: deeper input is refused
/// with [`ParseCause::TooDeep`] instead of recursing without bound (and overflowing the stack).
/// RabbitMQ itself refuses far shallower tables in the arguments it decodes.
pub const MAX_NESTING_DEPTH: usize = 64;

/// Why a value could not be decoded, kept in [`ParserErrors`] so callers can report it.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub enum ParseCause {
    /// A short string (a field name or a property) that is not UTF-8
    InvalidUtf8,
    /// A field value whose type byte is not a known [AMQPType](../type.AMQPType.html)
    UnknownType(u8),
    /// Field tables and arrays nested deeper than [`MAX_NESTING_DEPTH`]
    TooDeep,
    /// A value running past the end of its field table, field array or frame
    Truncated,
}

impl fmt::Display for ParseCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseCause::InvalidUtf8 => f.write_str("invalid UTF-8 in a short string"),
            ParseCause::UnknownType(t) if t.is_ascii_graphic() => {
                write!(f, "unknown field type '{}'", char::from(t))
            }
            ParseCause::UnknownType(t) => write!(f, "unknown field type 0x{t:02x}"),
            ParseCause::TooDeep => write!(
                f,
                "field tables nested deeper than {MAX_NESTING_DEPTH} levels"
            ),
            ParseCause::Truncated => f.write_str("a value runs past the end of its table or frame"),
        }
    }
}

/// Struct holding the errors stack
#[derive(Clone, Debug, PartialEq)]
pub struct ParserErrors {
    error: VerboseErrorKind,
    errors: Option<Vec<VerboseErrorKind>>,
}

impl ParserErrors {
    #[cfg(not(feature = "verbose-errors"))]
    fn init_errors() -> Option<Vec<VerboseErrorKind>> {
        None
    }
    #[cfg(feature = "verbose-errors")]
    fn init_errors() -> Option<Vec<VerboseErrorKind>> {
        Some(Vec::new())
    }

    /// An error for a known cause
    #[must_use]
    pub fn from_cause(cause: ParseCause) -> Self {
        Self {
            error: VerboseErrorKind::Cause(cause),
            errors: Self::init_errors(),
        }
    }

    /// Why decoding failed, when known
    #[must_use]
    pub fn cause(&self) -> Option<ParseCause> {
        match self.error {
            VerboseErrorKind::Cause(cause) => Some(cause),
            _ => None,
        }
    }
}

impl<I> ParseError<I> for ParserErrors {
    fn from_error_kind(_input: I, kind: ErrorKind) -> Self {
        Self {
            error: VerboseErrorKind::Nom(kind),
            errors: Self::init_errors(),
        }
    }

    fn append(_input: I, kind: ErrorKind, mut other: Self) -> Self {
        if let Some(errors) = other.errors.as_mut() {
            errors.push(VerboseErrorKind::Nom(kind));
        }
        other
    }

    fn from_char(_input: I, c: char) -> Self {
        Self {
            error: VerboseErrorKind::Char(c),
            errors: Self::init_errors(),
        }
    }
}

impl<I> ContextError<I> for ParserErrors {
    fn add_context(_input: I, ctx: &'static str, mut other: Self) -> Self {
        if let Some(errors) = other.errors.as_mut() {
            errors.push(VerboseErrorKind::Context(ctx));
        }
        other
    }
}

impl<I, E> nom::error::FromExternalError<I, E> for ParserErrors {
    fn from_external_error(input: I, kind: ErrorKind, _e: E) -> Self {
        Self::from_error_kind(input, kind)
    }
}

impl fmt::Display for ParserErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.error {
            VerboseErrorKind::Cause(cause) => write!(f, "Parser error: {cause}")?,
            ref error => write!(f, "Parser error: {error:?}")?,
        }
        if let Some(errors) = self.errors.as_ref() {
            for error in errors {
                writeln!(f)?;
                write!(f, "\tat {error:?}")?;
            }
        }
        Ok(())
    }
}

impl error::Error for ParserErrors {}

/// Error returned by parsers
pub type ParserError = nom::Err<ParserErrors>;
/// Return type of parsers
pub type ParserResult<I, T> = Result<(I, T), ParserError>;

/// Parse the [AMQPValue](../type.AMQPValue.html) of the given [AMQPType](../type.AMQPType.html)
#[must_use]
pub fn parse_raw_value<I: ParsableInput>(
    amqp_type: AMQPType,
) -> impl Parser<I, Output = AMQPValue, Error = ParserErrors> {
    context("parse_raw_value", move |i| {
        parse_raw_value_at(i, amqp_type, 0)
    })
}

/// `parse_raw_value` for a value inside `depth` enclosing tables or arrays. Tables and arrays
/// recurse through here, so this frame (and theirs) is kept small: scalars are parsed apart.
fn parse_raw_value_at<I: ParsableInput>(
    i: I,
    amqp_type: AMQPType,
    depth: usize,
) -> ParserResult<I, AMQPValue> {
    match amqp_type {
        AMQPType::FieldArray => {
            parse_field_array_at(i, depth + 1).map(|(i, array)| (i, AMQPValue::FieldArray(array)))
        }
        AMQPType::FieldTable => {
            parse_field_table_at(i, depth + 1).map(|(i, table)| (i, AMQPValue::FieldTable(table)))
        }
        amqp_type => parse_scalar(i, amqp_type),
    }
}

/// A value of any type but tables and arrays.
#[inline(never)]
fn parse_scalar<I: ParsableInput>(i: I, amqp_type: AMQPType) -> ParserResult<I, AMQPValue> {
    match amqp_type {
        AMQPType::Boolean => map(parse_boolean, AMQPValue::Boolean).parse(i),
        AMQPType::ShortShortInt => map(parse_short_short_int, AMQPValue::ShortShortInt).parse(i),
        AMQPType::ShortShortUInt => map(parse_short_short_uint, AMQPValue::ShortShortUInt).parse(i),
        AMQPType::ShortInt => map(parse_short_int, AMQPValue::ShortInt).parse(i),
        AMQPType::ShortUInt => map(parse_short_uint, AMQPValue::ShortUInt).parse(i),
        AMQPType::LongInt => map(parse_long_int, AMQPValue::LongInt).parse(i),
        AMQPType::LongUInt => map(parse_long_uint, AMQPValue::LongUInt).parse(i),
        AMQPType::LongLongInt => map(parse_long_long_int, AMQPValue::LongLongInt).parse(i),
        /* RabbitMQ treats LongLongUInt as a LongLongInt hence expose it as such */
        AMQPType::LongLongUInt => map(parse_long_long_int, AMQPValue::LongLongInt).parse(i),
        AMQPType::Float => map(parse_float, AMQPValue::Float).parse(i),
        AMQPType::Double => map(parse_double, AMQPValue::Double).parse(i),
        AMQPType::DecimalValue => map(parse_decimal_value, AMQPValue::DecimalValue).parse(i),
        AMQPType::ShortString => map(parse_short_string, AMQPValue::ShortString).parse(i),
        AMQPType::LongString => map(parse_long_string, AMQPValue::LongString).parse(i),
        AMQPType::FieldArray => map(parse_field_array, AMQPValue::FieldArray).parse(i),
        AMQPType::Timestamp => map(parse_timestamp, AMQPValue::Timestamp).parse(i),
        AMQPType::FieldTable => map(parse_field_table, AMQPValue::FieldTable).parse(i),
        AMQPType::ByteArray => map(parse_byte_array, AMQPValue::ByteArray).parse(i),
        AMQPType::Void => Ok((i, AMQPValue::Void)),
    }
}

/// Parse an [AMQPValue](../type.AMQPValue.html)
pub fn parse_value<I: ParsableInput>(i: I) -> ParserResult<I, AMQPValue> {
    context("parse_value", |i| parse_value_at(i, 0)).parse(i)
}

/// `parse_value` for a value inside `depth` enclosing tables or arrays.
fn parse_value_at<I: ParsableInput>(i: I, depth: usize) -> ParserResult<I, AMQPValue> {
    let (i, amqp_type) = parse_type(i)?;
    parse_raw_value_at(i, amqp_type, depth)
}

/// Parse an [AMQPType](../type.AMQPType.html)
pub fn parse_type<I: ParsableInput>(i: I) -> ParserResult<I, AMQPType> {
    context("parse_type", |i| {
        let (rest, id) = parse_short_short_uint(i)?;
        match AMQPType::from_id(char::from(id)) {
            Some(amqp_type) => Ok((rest, amqp_type)),
            None => Err(nom::Err::Error(ParserErrors::from_cause(
                ParseCause::UnknownType(id),
            ))),
        }
    })
    .parse(i)
}

/// Parse an id [(ShortUInt)](../type.ShortUInt.html)
pub fn parse_id<I: ParsableInput>(i: I) -> ParserResult<I, ShortUInt> {
    context("parse_id", parse_short_uint).parse(i)
}

/// Parse a [Boolean](../type.Boolean.html)
pub fn parse_boolean<I: ParsableInput>(i: I) -> ParserResult<I, Boolean> {
    context("parse_boolean", map(be_u8, |b| b != 0)).parse(i)
}

/// Parse a [ShortShortInt](../type.ShortShortInt.html)
pub fn parse_short_short_int<I: ParsableInput>(i: I) -> ParserResult<I, ShortShortInt> {
    context("parse_short_short_int", be_i8).parse(i)
}

/// Parse a [ShortShortUInt](../type.ShortShortUInt.html)
pub fn parse_short_short_uint<I: ParsableInput>(i: I) -> ParserResult<I, ShortShortUInt> {
    context("parse_short_short_uint", be_u8).parse(i)
}

/// Parse a [ShortInt](../type.ShortInt.html)
pub fn parse_short_int<I: ParsableInput>(i: I) -> ParserResult<I, ShortInt> {
    context("parse_short_int", be_i16).parse(i)
}

/// Parse a [ShortUInt](../type.ShortUInt.html)
pub fn parse_short_uint<I: ParsableInput>(i: I) -> ParserResult<I, ShortUInt> {
    context("parse_short_uint", be_u16).parse(i)
}

/// Parse a [LongInt](../type.LongInt.html)
pub fn parse_long_int<I: ParsableInput>(i: I) -> ParserResult<I, LongInt> {
    context("parse_long_int", be_i32).parse(i)
}

/// Parse a [LongUInt](../type.LongUInt.html)
pub fn parse_long_uint<I: ParsableInput>(i: I) -> ParserResult<I, LongUInt> {
    context("parse_long_uint", be_u32).parse(i)
}

/// Parse a [LongLongInt](../type.LongLongInt.html)
pub fn parse_long_long_int<I: ParsableInput>(i: I) -> ParserResult<I, LongLongInt> {
    context("parse_long_long_int", be_i64).parse(i)
}

/// Parse a [LongLongUInt](../type.LongLongUInt.html)
pub fn parse_long_long_uint<I: ParsableInput>(i: I) -> ParserResult<I, LongLongUInt> {
    context("parse_long_long_uint", be_u64).parse(i)
}

/// Parse a [Float](../type.Float.html)
pub fn parse_float<I: ParsableInput>(i: I) -> ParserResult<I, Float> {
    context("parse_float", be_f32).parse(i)
}

/// Parse a [Double](../type.Double.html)
pub fn parse_double<I: ParsableInput>(i: I) -> ParserResult<I, Double> {
    context("parse_double", be_f64).parse(i)
}

/// Parse a [DecimalValue](../type.DecimalValue.html)
pub fn parse_decimal_value<I: ParsableInput>(i: I) -> ParserResult<I, DecimalValue> {
    context(
        "parse_decimal_value",
        map(
            pair(parse_short_short_uint, parse_long_uint),
            |(scale, value)| DecimalValue { scale, value },
        ),
    )
    .parse(i)
}

fn make_str<I: Input<Item = u8>>(i: I) -> Result<String, std::string::FromUtf8Error> {
    String::from_utf8(i.iter_elements().collect())
}

/// Parse a [ShortString](../type.ShortString.html)
pub fn parse_short_string<I: ParsableInput>(i: I) -> ParserResult<I, ShortString> {
    context("parse_short_string", |i| {
        let (rest, bytes) = flat_map(parse_short_short_uint, take).parse(i)?;
        match make_str(bytes) {
            Ok(s) => Ok((rest, ShortString::from(s))),
            Err(_) => Err(nom::Err::Error(ParserErrors::from_cause(
                ParseCause::InvalidUtf8,
            ))),
        }
    })
    .parse(i)
}

/// Parse a [LongString](../type.LongString.html)
pub fn parse_long_string<I: ParsableInput>(i: I) -> ParserResult<I, LongString> {
    context(
        "parse_long_string",
        map(flat_map(parse_long_uint, take), |i: I| {
            i.iter_elements().collect::<Vec<u8>>().into()
        }),
    )
    .parse(i)
}

/// Parse a [FieldArray](../type.FieldArray.html)
pub fn parse_field_array<I: ParsableInput>(i: I) -> ParserResult<I, FieldArray> {
    context("parse_field_array", |i| parse_field_array_at(i, 1)).parse(i)
}

/// `parse_field_array` for an array at nesting level `depth` (1 for the outermost).
fn parse_field_array_at<I: ParsableInput>(i: I, depth: usize) -> ParserResult<I, FieldArray> {
    let (rest, mut entries) = nested(i, depth)?;
    let mut array = FieldArray::default();
    while entries.input_len() > 0 {
        let at = entries.clone();
        let (next, value) = within(
            parse_value_at(entries, depth),
            at,
            "parse_field_array_entry",
        )?;
        array.push(value);
        entries = next;
    }
    Ok((rest, array))
}

/// The bytes of a table or array at nesting level `depth`, after its length prefix.
fn nested<I: ParsableInput>(i: I, depth: usize) -> ParserResult<I, I> {
    if depth > MAX_NESTING_DEPTH {
        return Err(nom::Err::Failure(ParserErrors::from_cause(
            ParseCause::TooDeep,
        )));
    }
    flat_map(parse_long_uint, take).parse(i)
}

/// An entry of a table or array lies wholly inside the length of its container, so running out
/// of bytes there is a truncated value, not a need for more input; and any error there is final
/// (a `Failure`), so that it reaches the caller with its cause instead of ending a loop early.
/// (A plain function rather than `context` and `pair`: tables and arrays recurse through the
/// callers, and every combinator frame there costs stack per nesting level.)
fn within<I: Clone, O>(
    result: ParserResult<I, O>,
    entry: I,
    ctx: &'static str,
) -> ParserResult<I, O> {
    result.map_err(|err| {
        let err = match err {
            nom::Err::Incomplete(_) => ParserErrors::from_cause(ParseCause::Truncated),
            nom::Err::Error(err) | nom::Err::Failure(err) => err,
        };
        nom::Err::Failure(ParserErrors::add_context(entry, ctx, err))
    })
}

/// Parse a [Timestamp](../type.Timestamp.html)
pub fn parse_timestamp<I: ParsableInput>(i: I) -> ParserResult<I, Timestamp> {
    context("parse_timestamp", parse_long_long_uint).parse(i)
}

/// Parse a [FieldTable](../type.FieldTable.html)
pub fn parse_field_table<I: ParsableInput>(i: I) -> ParserResult<I, FieldTable> {
    context("parse_field_table", |i| parse_field_table_at(i, 1)).parse(i)
}

/// `parse_field_table` for a table at nesting level `depth` (1 for the outermost).
fn parse_field_table_at<I: ParsableInput>(i: I, depth: usize) -> ParserResult<I, FieldTable> {
    let (rest, mut entries) = nested(i, depth)?;
    let mut table = FieldTable::default();
    while entries.input_len() > 0 {
        let at = entries.clone();
        let (next, key) = within(
            parse_short_string(entries),
            at.clone(),
            "parse_field_table_entry",
        )?;
        let (next, value) = within(parse_value_at(next, depth), at, "parse_field_table_entry")?;
        table.insert(key, value);
        entries = next;
    }
    Ok((rest, table))
}

/// Parse a [ByteArray](../type.ByteArray.html)
pub fn parse_byte_array<I: ParsableInput>(i: I) -> ParserResult<I, ByteArray> {
    context(
        "parse_byte_array",
        map(flat_map(parse_long_uint, take), |i: I| {
            i.iter_elements().collect::<Vec<u8>>().into()
        }),
    )
    .parse(i)
}

/// Parse the [AMQPFlags](../type.AMQPFlags.html) for which the names are provided
pub fn parse_flags<I: ParsableInput>(i: I, names: &[&str]) -> ParserResult<I, AMQPFlags> {
    context(
        "parse_flags",
        map(take(names.len().div_ceil(8)), |b| {
            AMQPFlags::from_bytes(names, b)
        }),
    )
    .parse(i)
}

/// Traits required for parsing
pub mod traits {
    /// Reexport nom traits required for parsing
    pub use nom::{Compare, CompareResult, Input, Needed};

    /// Trait used to ensure we can properly parse input
    pub trait ParsableInput: Clone + Compare<&'static [u8]> + Input<Item = u8> + PartialEq {}

    impl<T: Clone + Compare<&'static [u8]> + Input<Item = u8> + PartialEq> ParsableInput for T {}
}

#[cfg(test)]
mod test {
    use super::*;

    const EMPTY: &[u8] = b"";

    #[test]
    fn test_parse_value() {
        assert_eq!(
            parse_value(&[84, 42, 42, 42, 42, 42, 42, 42, 42][..]),
            Ok((EMPTY, AMQPValue::Timestamp(3038287259199220266)))
        );
        assert_eq!(
            parse_value(&[83, 0, 0, 0, 4, 116, 101, 115, 116][..]),
            Ok((EMPTY, AMQPValue::LongString("test".into())))
        );
    }

    #[test]
    fn test_parse_raw_value() {
        assert_eq!(
            parse_raw_value(AMQPType::Timestamp).parse(&[42, 42, 42, 42, 42, 42, 42, 42][..]),
            Ok((EMPTY, AMQPValue::Timestamp(3038287259199220266)))
        );
        assert_eq!(
            parse_raw_value(AMQPType::LongString).parse(&[0, 0, 0, 4, 116, 101, 115, 116][..]),
            Ok((EMPTY, AMQPValue::LongString("test".into())))
        );
        /* Test internal exceptions */
        assert_eq!(
            parse_raw_value(AMQPType::LongLongUInt).parse(&[42, 42, 42, 42, 42, 42, 42, 42][..]),
            Ok((EMPTY, AMQPValue::LongLongInt(3038287259199220266)))
        );
        assert_eq!(
            parse_raw_value(AMQPType::ShortString).parse(&[4, 116, 101, 115, 116][..]),
            Ok((EMPTY, AMQPValue::ShortString("test".into())))
        );
    }

    #[test]
    fn test_parse_type() {
        assert_eq!(parse_type(&[116][..]), Ok((EMPTY, AMQPType::Boolean)));
        assert_eq!(parse_type(&[102][..]), Ok((EMPTY, AMQPType::Float)));
    }

    #[test]
    fn test_parse_id() {
        assert_eq!(parse_id(&[0, 0][..]), Ok((EMPTY, 0)));
        assert_eq!(parse_id(&[255, 255][..]), Ok((EMPTY, 65535)));
    }

    #[test]
    fn test_parse_boolean() {
        assert_eq!(parse_boolean(&[0][..]), Ok((EMPTY, false)));
        assert_eq!(parse_boolean(&[1][..]), Ok((EMPTY, true)));
    }

    #[test]
    fn test_parse_short_short_int() {
        assert_eq!(parse_short_short_int(&[0][..]), Ok((EMPTY, 0)));
        assert_eq!(parse_short_short_int(&[255][..]), Ok((EMPTY, -1)));
    }

    #[test]
    fn test_parse_short_short_uint() {
        assert_eq!(parse_short_short_uint(&[0][..]), Ok((EMPTY, 0)));
        assert_eq!(parse_short_short_uint(&[255][..]), Ok((EMPTY, 255)));
    }

    #[test]
    fn test_parse_short_int() {
        assert_eq!(parse_short_int(&[0, 0][..]), Ok((EMPTY, 0)));
        assert_eq!(parse_short_int(&[255, 255][..]), Ok((EMPTY, -1)));
    }

    #[test]
    fn test_parse_short_uint() {
        assert_eq!(parse_short_uint(&[0, 0][..]), Ok((EMPTY, 0)));
        assert_eq!(parse_short_uint(&[255, 255][..]), Ok((EMPTY, 65535)));
    }

    #[test]
    fn test_parse_long_int() {
        assert_eq!(parse_long_int(&[0, 0, 0, 0][..]), Ok((EMPTY, 0)));
        assert_eq!(parse_long_int(&[255, 255, 255, 255][..]), Ok((EMPTY, -1)));
    }

    #[test]
    fn test_parse_long_uint() {
        assert_eq!(parse_long_uint(&[0, 0, 0, 0][..]), Ok((EMPTY, 0)));
        assert_eq!(
            parse_long_uint(&[255, 255, 255, 255][..]),
            Ok((EMPTY, 4294967295))
        );
    }

    #[test]
    fn test_parse_long_long_int() {
        assert_eq!(
            parse_long_long_int(&[0, 0, 0, 0, 0, 0, 0, 0][..]),
            Ok((EMPTY, 0))
        );
        assert_eq!(
            parse_long_long_int(&[255, 255, 255, 255, 255, 255, 255, 255][..]),
            Ok((EMPTY, -1))
        );
    }

    #[test]
    fn test_parse_long_long_uint() {
        assert_eq!(
            parse_long_long_uint(&[0, 0, 0, 0, 0, 0, 0, 0][..]),
            Ok((EMPTY, 0))
        );
        assert_eq!(
            parse_long_long_uint(&[255, 255, 255, 255, 255, 255, 255, 255][..]),
            Ok((EMPTY, 18446744073709551615))
        );
    }

    #[test]
    fn test_parse_float() {
        assert_eq!(parse_float(&[0, 0, 0, 0][..]), Ok((EMPTY, 0.)));
        assert_eq!(parse_float(&[66, 41, 174, 20][..]), Ok((EMPTY, 42.42)));
    }

    #[test]
    fn test_parse_double() {
        assert_eq!(parse_double(&[0, 0, 0, 0, 0, 0, 0, 0][..]), Ok((EMPTY, 0.)));
        assert_eq!(
            parse_double(&[64, 69, 53, 194, 143, 92, 40, 246][..]),
            Ok((EMPTY, 42.42))
        );
    }

    #[test]
    fn test_parse_decimal_value() {
        assert_eq!(
            parse_decimal_value(&[0, 0, 0, 0, 0][..]),
            Ok((EMPTY, DecimalValue { scale: 0, value: 0 }))
        );
        assert_eq!(
            parse_decimal_value(&[255, 255, 255, 255, 255][..]),
            Ok((
                EMPTY,
                DecimalValue {
                    scale: 255,
                    value: 4294967295
                }
            ))
        );
    }

    #[test]
    fn test_parse_short_string() {
        assert_eq!(
            parse_short_string(&[0][..]),
            Ok((EMPTY, ShortString::default()))
        );
        assert_eq!(
            parse_short_string(&[4, 116, 101, 115, 116][..]),
            Ok((EMPTY, "test".into()))
        );
    }

    #[test]
    fn test_parse_long_string() {
        assert_eq!(
            parse_long_string(&[0, 0, 0, 0][..]),
            Ok((EMPTY, LongString::default()))
        );
        assert_eq!(
            parse_long_string(&[0, 0, 0, 4, 116, 101, 115, 116][..]),
            Ok((EMPTY, "test".into()))
        );
    }

    #[test]
    fn test_parse_field_array() {
        assert_eq!(
            parse_field_array(&[0, 0, 0, 0][..]),
            Ok((EMPTY, FieldArray::default()))
        );
        assert_eq!(
            parse_field_array(&[0, 0, 0, 10, 83, 0, 0, 0, 4, 116, 101, 115, 116, 86][..]),
            Ok((
                EMPTY,
                vec![AMQPValue::LongString("test".into()), AMQPValue::Void].into()
            ))
        );
    }

    #[test]
    fn test_parse_timestamp() {
        assert_eq!(
            parse_timestamp(&[0, 0, 0, 0, 0, 0, 0, 0][..]),
            Ok((EMPTY, 0))
        );
        assert_eq!(
            parse_timestamp(&[255, 255, 255, 255, 255, 255, 255, 255][..]),
            Ok((EMPTY, 18446744073709551615))
        );
    }

    #[test]
    fn test_parse_field_table() {
        let mut table = FieldTable::default();
        table.insert("test".into(), AMQPValue::LongString("test".into()));
        table.insert("tt".into(), AMQPValue::Void);
        assert_eq!(
            parse_field_table(&[0, 0, 0, 0][..]),
            Ok((EMPTY, FieldTable::default()))
        );
        assert_eq!(
            parse_field_table(
                &[
                    0, 0, 0, 18, 4, 116, 101, 115, 116, 83, 0, 0, 0, 4, 116, 101, 115, 116, 2, 116,
                    116, 86
                ][..]
            ),
            Ok((EMPTY, table))
        );
    }

    /// A value of `depth` field arrays nested in each other.
    fn nested_arrays(depth: usize) -> Vec<u8> {
        (1..=depth)
            .rev()
            .flat_map(|level| {
                let len = 5 * (level as u32 - 1);
                std::iter::once(b'A').chain(len.to_be_bytes())
            })
            .collect()
    }

    /// A field table holding `entry` (key and value bytes).
    fn table_of(entry: &[u8]) -> Vec<u8> {
        let mut table = (entry.len() as u32).to_be_bytes().to_vec();
        table.extend_from_slice(entry);
        table
    }

    fn cause<O: fmt::Debug>(result: ParserResult<&[u8], O>) -> Option<ParseCause> {
        match result {
            Err(nom::Err::Error(e) | nom::Err::Failure(e)) => e.cause(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn test_nesting_limit() {
        // A table is level 1, so its value may nest MAX_NESTING_DEPTH - 1 more arrays.
        let mut ok = vec![1, b'k'];
        ok.extend(nested_arrays(MAX_NESTING_DEPTH - 1));
        assert!(parse_field_table(&table_of(&ok)[..]).is_ok());
        let mut deep = vec![1, b'k'];
        deep.extend(nested_arrays(MAX_NESTING_DEPTH));
        assert_eq!(
            cause(parse_field_table(&table_of(&deep)[..])),
            Some(ParseCause::TooDeep)
        );
    }

    #[test]
    fn test_deep_nesting_does_not_overflow_a_small_stack() {
        let value = nested_arrays(100_000);
        assert_eq!(
            parse_value(&nested_arrays(3)[..]).map(|(i, _)| i),
            Ok(EMPTY)
        );
        let result = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || cause(parse_value(&value[..])))
            .expect("thread")
            .join()
            .expect("no stack overflow");
        assert_eq!(result, Some(ParseCause::TooDeep));
    }

    #[test]
    fn test_causes_survive_tables() {
        // A key that is not UTF-8.
        let bad_key = table_of(&[2, 0xc3, 0x28, b'V']);
        assert_eq!(
            cause(parse_field_table(&bad_key[..])),
            Some(ParseCause::InvalidUtf8)
        );
        // A value of unknown type, inside an array inside a table.
        let array = [b'A', 0, 0, 0, 1, b'Z'];
        let mut entry = vec![1, b'k'];
        entry.extend_from_slice(&array);
        let unknown = table_of(&entry);
        assert_eq!(
            cause(parse_field_table(&unknown[..])),
            Some(ParseCause::UnknownType(b'Z'))
        );
        assert_eq!(
            ParseCause::UnknownType(b'Z').to_string(),
            "unknown field type 'Z'"
        );
        assert_eq!(
            ParseCause::UnknownType(0).to_string(),
            "unknown field type 0x00"
        );
        // A long string longer than its table.
        let truncated = table_of(&[1, b'k', b'S', 0, 0, 0, 9, b'x']);
        assert_eq!(
            cause(parse_field_table(&truncated[..])),
            Some(ParseCause::Truncated)
        );
        // Outside a table, a short input still only needs more bytes.
        assert!(matches!(
            parse_field_table(&[0, 0, 0, 9, 1][..]),
            Err(nom::Err::Incomplete(_))
        ));
    }

    #[test]
    fn test_invalid_short_string() {
        assert_eq!(
            cause(parse_short_string(&[2, 0xff, 0xfe][..])),
            Some(ParseCause::InvalidUtf8)
        );
    }

    #[test]
    fn test_parse_byte_array() {
        assert_eq!(
            parse_byte_array(&[0, 0, 0, 0][..]),
            Ok((EMPTY, ByteArray::default()))
        );
        assert_eq!(
            parse_byte_array(&[0, 0, 0, 4, 42, 1, 2, 3][..]),
            Ok((EMPTY, vec![42, 1, 2, 3].into()))
        );
    }

    #[test]
    fn test_parse_flags() {
        let mut flags = AMQPFlags::default();
        let mut names = Vec::new();
        names.push("a");
        flags.add_flag("a".to_string(), true);
        names.push("b");
        flags.add_flag("b".to_string(), false);
        names.push("c");
        flags.add_flag("c".to_string(), true);
        names.push("d");
        flags.add_flag("d".to_string(), true);
        assert_eq!(
            parse_flags(&[0b00001101][..], &names),
            Ok((EMPTY, flags.clone()))
        );
        names.push("e");
        flags.add_flag("e".to_string(), true);
        names.push("f");
        flags.add_flag("f".to_string(), false);
        names.push("g");
        flags.add_flag("g".to_string(), true);
        names.push("h");
        flags.add_flag("h".to_string(), true);
        names.push("i");
        flags.add_flag("i".to_string(), false);
        names.push("j");
        flags.add_flag("j".to_string(), true);
        assert_eq!(
            parse_flags(&[0b11011101, 0b00000010][..], &names),
            Ok((EMPTY, flags))
        );
    }
}
