//! Conversions between Python objects and the SDK's types: JSON values, durations, and the
//! replies of awaitables.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::errors;

/// A JSON value as a native Python object (dict, list, str, int, float, bool, None).
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, value).map_err(PyErr::from)
}

/// `None` for an absent value, else [`to_py`].
pub fn opt_to_py(py: Python<'_>, value: Option<&Value>) -> PyResult<Py<PyAny>> {
    match value {
        Some(v) => Ok(to_py(py, v)?.unbind()),
        None => Ok(py.None()),
    }
}

/// A native Python object as JSON; anything JSON cannot hold (an arbitrary object, a
/// non-`str` key, an integer beyond 64 bits, a NaN or infinite float, containers nested
/// deeper than [`MAX_DEPTH`], so also one that holds itself) is a `TypeError`.
pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let mut depythonizer = pythonize::Depythonizer::from_object(obj);
    Json { depth: 0 }
        .deserialize(&mut depythonizer)
        .map_err(|e| PyTypeError::new_err(format!("not representable as JSON: {e}")))
}

/// How deeply containers may nest, as `serde_json` reads JSON text. The walk recurses once
/// per level on the stack of whichever thread converts (a handler's answer, a caller's
/// arguments): without a bound, a dict that holds itself, or a deep enough one, overflows it
/// and aborts the whole process. The bound also stops every cycle, so none is tracked.
const MAX_DEPTH: usize = 128;

/// A JSON value read as `serde_json::Value` reads one, except that a float JSON cannot hold
/// (NaN, ±infinity) is an error rather than `null`; `depth` counts the containers around it.
#[derive(Clone, Copy)]
struct Json {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Json {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Json {
    /// The seed of a container's members, or an error before recursing past the bound.
    fn inner<E: de::Error>(self) -> Result<Json, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format!(
                "nested deeper than {MAX_DEPTH} levels (a container that holds itself?)"
            )));
        }
        Ok(Json {
            depth: self.depth + 1,
        })
    }
}

impl<'de> Visitor<'de> for Json {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        Number::deserialize(de::value::I128Deserializer::new(value)).map(Value::Number)
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        Number::deserialize(de::value::U128Deserializer::new(value)).map(Value::Number)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("the float {value} (JSON has no NaN or infinity)")))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut members = Map::new();
        while let Some((key, value)) = map.next_entry_seed(PhantomData::<String>, inner)? {
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

/// `None` stays absent; anything else must convert to JSON.
pub fn opt_from_py(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Value>> {
    match obj {
        Some(o) if !o.is_none() => Ok(Some(from_py(o)?)),
        _ => Ok(None),
    }
}

/// An SDK value as its JSON (the server's JSON for what the SDK read, every member kept).
pub fn json(value: &impl serde::Serialize) -> PyResult<Value> {
    serde_json::to_value(value)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("not JSON: {e}")))
}

/// Seconds (int or float) as a `Duration`. Zero passes through: the SDK decides whether a
/// zero is acceptable where it is used. Only what no `Duration` can hold is refused here.
pub fn seconds(py: Python<'_>, value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        errors::invalid_config(
            py,
            &format!("{what} must be a finite, non-negative number of seconds (got {value})"),
        )
    })
}

/// A size in bytes; negative numbers are configuration errors rather than `OverflowError`s.
pub fn size(py: Python<'_>, value: i64, what: &str) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| errors::invalid_config(py, &format!("{what} must not be negative")))
}

/// A Rust value that becomes a Python object once the interpreter is attached.
///
/// Futures finish on a runtime thread, which never takes the GIL; the conversion runs later,
/// on the event loop's thread (see `bridge`).
pub trait IntoPython: Send + 'static {
    /// Converts, attached to the interpreter.
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

impl IntoPython for () {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }
}

impl IntoPython for Value {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(to_py(py, &self)?.unbind())
    }
}

impl<T: IntoPython> IntoPython for Vec<T> {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let items = self
            .into_iter()
            .map(|item| item.into_python(py))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?.into_any().unbind())
    }
}

/// The outcome of one SDK call, raised as the matching `McpResumeError` subclass when it
/// failed.
pub struct Reply<T>(pub Result<T, mcp_resume::Error>);

impl<T: IntoPython> IntoPython for Reply<T> {
    fn into_python(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.0 {
            Ok(value) => value.into_python(py),
            Err(err) => Err(errors::to_py_err(py, &err)),
        }
    }
}
