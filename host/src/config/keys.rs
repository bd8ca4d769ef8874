//! The keys worker.toml accepts, read from the serde types of `raw.rs` themselves, and the test
//! that docs/configuration.md documents exactly those: its complete example holds every key and
//! loads through the real parser, and each section's text names every key of its table.
//!
//! serde hands a struct's field names to `Deserializer::deserialize_struct`; a probe deserializer
//! that follows one path of keys down the raw types reads the fields at its end. One probe per
//! key, so a value the probe cannot make (a duration, a URL) never hides the keys after it.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde::de::value::{BorrowedStrDeserializer, Error, StrDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use super::raw::RawConfig;

/// A map segment of a path: `[kv.NAME]` is `kv.*`.
const ANY: &str = "*";

/// What the raw types hold at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// A table with these keys (a struct; an array of them is the same table).
    Table(Vec<&'static str>),
    /// A table of names the user picks (`[kv.NAME]`, `config`, `http_headers`).
    Map,
    /// A value.
    Leaf,
    /// The path does not exist.
    Missing,
}

/// The shape of `RawConfig` at `path`.
fn shape(path: &[&str]) -> Shape {
    let found = RefCell::new(Shape::Missing);
    // The probe always ends in an error: it has no values to give.
    let _ = <RawConfig as serde::Deserialize>::deserialize(Probe {
        path,
        found: &found,
    });
    found.into_inner()
}

/// Every key path the config accepts, dotted (`broker.url`, `kv.*.backend`); a table of free
/// names whose values are not tables (`subscription.config`) is one key.
fn accepted() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    walk(&mut Vec::new(), &mut keys);
    keys
}

fn walk(path: &mut Vec<&str>, keys: &mut BTreeSet<String>) {
    match shape(path) {
        Shape::Table(fields) => {
            for field in fields {
                path.push(field);
                walk(path, keys);
                path.pop();
            }
        }
        Shape::Map => {
            path.push(ANY);
            let named_tables = matches!(shape(path), Shape::Table(_));
            if named_tables {
                walk(path, keys);
            }
            path.pop();
            if !named_tables {
                keys.insert(path.join("."));
            }
        }
        Shape::Leaf | Shape::Missing => {
            keys.insert(path.join("."));
        }
    }
}

/// Follows `path` down whatever is deserialized, and records the shape at its end.
struct Probe<'p> {
    path: &'p [&'p str],
    found: &'p RefCell<Shape>,
}

impl Probe<'_> {
    fn stop<T>(&self, shape: Shape) -> Result<T, Error> {
        *self.found.borrow_mut() = shape;
        Err(de::Error::custom("probe"))
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        self.stop(Shape::Leaf)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        // toml's Spanned<T> is a struct of start, end and T: look through it.
        if serde_spanned::de::is_spanned(name) {
            return visitor.visit_map(SpannedAccess {
                fields,
                probe: Some(self),
                step: 0,
            });
        }
        match self.path.split_first() {
            None => self.stop(Shape::Table(fields.to_vec())),
            Some((&key, _)) if !fields.contains(&key) => self.stop(Shape::Missing),
            Some((&key, rest)) => visitor.visit_map(OneKey {
                key,
                value: Some(Probe {
                    path: rest,
                    found: self.found,
                }),
            }),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.path.split_first() {
            None => self.stop(Shape::Map),
            Some((&key, rest)) => visitor.visit_map(OneKey {
                key,
                value: Some(Probe {
                    path: rest,
                    found: self.found,
                }),
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// An array of tables is its table; an array of values, a value.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_seq(OneElement { probe: Some(self) })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// A map of one key, whose value is probed further.
struct OneKey<'p> {
    key: &'p str,
    value: Option<Probe<'p>>,
}

impl<'de> MapAccess<'de> for OneKey<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.value.is_none() {
            return Ok(None);
        }
        seed.deserialize(StrDeserializer::new(self.key)).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        match self.value.take() {
            Some(probe) => seed.deserialize(probe),
            None => Err(de::Error::custom("no value")),
        }
    }
}

/// The start, end and value of a Spanned<T> (its `fields`, in that order); the value is probed.
struct SpannedAccess<'p> {
    fields: &'static [&'static str],
    probe: Option<Probe<'p>>,
    step: usize,
}

impl<'de> MapAccess<'de> for SpannedAccess<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.fields.get(self.step) {
            Some(&key) => seed
                .deserialize(BorrowedStrDeserializer::new(key))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        self.step += 1;
        match self.step {
            1 | 2 => seed.deserialize(de::value::UsizeDeserializer::new(0)),
            _ => match self.probe.take() {
                Some(probe) => seed.deserialize(probe),
                None => Err(de::Error::custom("no value")),
            },
        }
    }
}

/// A sequence of one element, which is probed.
struct OneElement<'p> {
    probe: Option<Probe<'p>>,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.probe.take() {
            Some(probe) => seed.deserialize(probe).map(Some),
            None => Ok(None),
        }
    }
}

mod docs;
