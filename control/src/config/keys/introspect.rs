//! The keys a serde struct accepts, found by deserializing it from a walker that answers every
//! field with a placeholder value and records the field's path: what the derive says the file
//! may write, so a field added to a section cannot be missed by the key table's test.

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A value (a number, string, bool or array of them).
    Value,
    /// A table (`[dpdk]`).
    Table,
    /// An array of tables (`[[port]]`).
    Tables,
}

/// Every key path of `T` (`port.forward_to`, `port`, `dpdk`), in declaration order.
pub(crate) fn keys<T: for<'de> Deserialize<'de>>() -> Vec<(String, Shape)> {
    let mut keys = Vec::new();
    T::deserialize(Walker {
        path: String::new(),
        keys: &mut keys,
        slot: None,
        in_seq: false,
    })
    .expect("the walker answers every field");
    keys
}

#[derive(Debug)]
pub(crate) struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// Deserializes a placeholder for the value at `path`; `slot` is that key's entry in `keys`.
struct Walker<'a> {
    path: String,
    keys: &'a mut Vec<(String, Shape)>,
    slot: Option<usize>,
    in_seq: bool,
}

impl<'de> Deserializer<'de> for Walker<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error(format!("{}: a type the walker does not know", self.path)))
    }
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_bool(false)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u8(0)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u16(0)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u32(0)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u64(0)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_i64(0)
    }
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_str("")
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_str("")
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_some(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_seq(One {
            walker: Some(Walker { in_seq: true, ..self }),
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        if let Some(slot) = self.slot {
            self.keys[slot].1 = if self.in_seq { Shape::Tables } else { Shape::Table };
        }
        v.visit_map(Fields {
            path: self.path,
            keys: self.keys,
            fields,
            next: 0,
        })
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u128 f32 f64 char bytes byte_buf unit unit_struct newtype_struct tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A sequence of one placeholder element.
struct One<'a> {
    walker: Option<Walker<'a>>,
}

impl<'de> SeqAccess<'de> for One<'_> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.walker.take().map(|w| seed.deserialize(w)).transpose()
    }
}

/// A struct's fields, each recorded as a key as its value is walked.
struct Fields<'a> {
    path: String,
    keys: &'a mut Vec<(String, Shape)>,
    fields: &'static [&'static str],
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some(field) = self.fields.get(self.next) else {
            return Ok(None);
        };
        seed.deserialize(IntoDeserializer::<Error>::into_deserializer(*field))
            .map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let field = self.fields[self.next];
        self.next += 1;
        let path = if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        };
        self.keys.push((path.clone(), Shape::Value));
        let slot = Some(self.keys.len() - 1);
        seed.deserialize(Walker {
            path,
            keys: self.keys,
            slot,
            in_seq: false,
        })
    }
}
