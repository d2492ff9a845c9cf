//! `with_*` setters for the public configuration structs, which are `#[non_exhaustive]` so
//! that fields can be added without a breaking change: outside this crate they cannot be
//! built with a struct expression, so each field gets a setter that consumes and returns the
//! value, e.g. `ReconnectPolicy::default().with_max_attempts(3)`.

/// Implements `with_<field>(self, value) -> Self` for each `field: Type` listed.
macro_rules! with_setters {
    ($ty:ty { $($setter:ident => $field:ident: $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("The same value with [`", stringify!($field), "`](Self::",
                    stringify!($field), ") set to `", stringify!($field), "`.")]
                #[must_use]
                pub fn $setter(mut self, $field: $fty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

pub(crate) use with_setters;
