//! [`label_set!`]: a closed set of label values declared once.

/// Declares an enum whose variants are the values of a metric label, with `ALL` (every
/// variant, in counter-index order), `COUNT`, `LABELS` (the label values by index), `index()`
/// and `label()`, all from one list, so that a variant cannot be left out of any of them (a
/// variant missing from a hand-kept `ALL` compiles and indexes past its counters).
///
/// ```
/// fastpath::label_set! {
///     /// Which way.
///     pub enum Way {
///         /// Into the kernel.
///         In => "to_kernel",
///         /// Out of it.
///         Out => "from_kernel",
///     }
/// }
/// assert_eq!(Way::ALL, [Way::In, Way::Out]);
/// assert_eq!((Way::Out.index(), Way::Out.label()), (1, "from_kernel"));
/// ```
#[macro_export]
macro_rules! label_set {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$doc:meta])* $variant:ident => $value:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every value, in counter-index order.
            pub const ALL: [$name; [$($value),*].len()] = [$($name::$variant),*];
            /// How many values there are.
            pub const COUNT: usize = [$($value),*].len();
            /// The label values, by [`Self::index`] (never renamed once released).
            pub const LABELS: [&'static str; [$($value),*].len()] = [$($value),*];

            /// Counter index: the position in [`Self::ALL`].
            #[inline]
            pub fn index(self) -> usize {
                self as usize
            }

            /// The label value.
            #[inline]
            pub fn label(self) -> &'static str {
                Self::LABELS[self as usize]
            }
        }
    };
}
