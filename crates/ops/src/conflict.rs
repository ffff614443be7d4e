//! Read-modify-write with conflict retry, the same for every writer (the controller's patches,
//! the agent's and the principal's writes, the HA replica's): read the object, compute and send
//! the write from what was read; when the write loses a race with another writer (the caller says
//! which errors are such conflicts), read again and retry at once, a bounded number of times.
//! When every attempt conflicted, [`Error::KeptConflicting`] names the object.
//!
//! Errors that are not conflicts — and every error of the read — end the loop as they are
//! ([`Error::Failed`]).

use std::fmt;

/// Why [`read_modify_write`] failed.
#[derive(Debug)]
pub enum Error<E> {
    /// The read failed, or the write failed with an error that is not a conflict: the error
    /// as the caller's step returned it.
    Failed(E),
    /// Each of `attempts` writes conflicted; `last` is the last write's error.
    KeptConflicting {
        object: String,
        attempts: u32,
        last: E,
    },
}

impl<E> Error<E> {
    /// The caller's own error: the one that failed, or the last conflict.
    pub fn into_last(self) -> E {
        match self {
            Error::Failed(e) | Error::KeptConflicting { last: e, .. } => e,
        }
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Failed(e) => e.fmt(f),
            Error::KeptConflicting { object, .. } => write!(f, "{object}: too many conflicts"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Failed(e) => e.source(),
            Error::KeptConflicting { last, .. } => Some(last),
        }
    }
}

/// A namespaced object's name as [`Error::KeptConflicting`] shows it: `namespace/name`.
#[derive(Debug, Clone, Copy)]
pub struct NamespacedName<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

impl fmt::Display for NamespacedName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Runs `read` then `write` with what was read, at most `attempts` times (at least once): again
/// from a fresh read as long as `write` fails with an error for which `is_conflict` holds. A read
/// error, a write error that is not a conflict and the write's success end it at once.
/// `object` names the object in [`Error::KeptConflicting`] and the debug log of each retry.
///
/// `read` and `write` are closures returning futures, not async closures: rustc cannot yet prove
/// the future of an async closure that borrows `Send` for every lifetime, which the callers'
/// spawned tasks need.
pub async fn read_modify_write<O, C, T, E, R, W>(
    object: O,
    attempts: u32,
    is_conflict: impl Fn(&E) -> bool,
    mut read: impl FnMut() -> R,
    mut write: impl FnMut(C) -> W,
) -> Result<T, Error<E>>
where
    O: fmt::Display,
    R: Future<Output = Result<C, E>>,
    W: Future<Output = Result<T, E>>,
{
    let attempts = attempts.max(1);
    let mut attempt = 1;
    loop {
        let current = read().await.map_err(Error::Failed)?;
        match write(current).await {
            Err(e) if is_conflict(&e) => {
                if attempt >= attempts {
                    return Err(Error::KeptConflicting {
                        object: object.to_string(),
                        attempts,
                        last: e,
                    });
                }
                tracing::debug!(%object, attempt, "conflict; retrying the write");
                attempt += 1;
            }
            r => return r.map_err(Error::Failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    #[derive(Debug, PartialEq)]
    enum E {
        Conflict(u32),
        Other,
    }

    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{self:?}")
        }
    }

    fn conflict(e: &E) -> bool {
        matches!(e, E::Conflict(_))
    }

    /// A store holding a version number: a write succeeds only against the version it read
    /// (unless `races` other writers get in first, each bumping the version once).
    struct Versioned {
        version: Cell<u32>,
        races: Cell<u32>,
        reads: Cell<u32>,
        writes: Cell<u32>,
    }

    impl Versioned {
        fn new(races: u32) -> Self {
            Versioned {
                version: Cell::new(0),
                races: Cell::new(races),
                reads: Cell::new(0),
                writes: Cell::new(0),
            }
        }

        async fn read(&self) -> Result<u32, E> {
            self.reads.set(self.reads.get() + 1);
            Ok(self.version.get())
        }

        /// Writes on top of version `read`; another writer gets in first while races remain.
        async fn write(&self, read: u32) -> Result<u32, E> {
            self.writes.set(self.writes.get() + 1);
            if self.races.get() > 0 {
                self.races.set(self.races.get() - 1);
                self.version.set(self.version.get() + 1);
            }
            if read != self.version.get() {
                return Err(E::Conflict(self.writes.get()));
            }
            self.version.set(read + 1);
            Ok(read + 1)
        }
    }

    #[tokio::test]
    async fn a_conflict_is_retried_from_a_fresh_read_until_the_write_succeeds() {
        let s = Versioned::new(2);
        let r = read_modify_write("ns/a", 5, conflict, || s.read(), |v| s.write(v)).await;
        // the two racing writers made versions 1 and 2; ours, from a fresh read of 2, is 3
        assert_eq!(r.unwrap(), 3);
        assert_eq!((s.reads.get(), s.writes.get()), (3, 3));
    }

    #[tokio::test]
    async fn each_write_gets_what_its_own_attempt_read() {
        let reads = Cell::new(0);
        let seen = RefCell::new(Vec::new());
        let r = read_modify_write(
            "a",
            3,
            conflict,
            || {
                reads.set(reads.get() + 1);
                async { Ok(reads.get() * 10) }
            },
            |cur| {
                seen.borrow_mut().push(cur);
                async move { Err::<(), _>(E::Conflict(cur)) }
            },
        )
        .await;
        assert!(r.is_err());
        assert_eq!(*seen.borrow(), [10, 20, 30]);
    }

    #[tokio::test]
    async fn it_gives_up_after_the_attempts_naming_the_object() {
        let s = Versioned::new(u32::MAX);
        let r = read_modify_write(
            NamespacedName {
                namespace: "argocd",
                name: "guestbook",
            },
            8,
            conflict,
            || s.read(),
            |v| s.write(v),
        )
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.to_string(), "argocd/guestbook: too many conflicts");
        match e {
            Error::KeptConflicting {
                object,
                attempts,
                last,
            } => {
                assert_eq!((object.as_str(), attempts), ("argocd/guestbook", 8));
                assert_eq!(last, E::Conflict(8), "the last write's error");
            }
            e => panic!("{e:?}"),
        }
        assert_eq!((s.reads.get(), s.writes.get()), (8, 8));
    }

    #[tokio::test]
    async fn an_error_that_is_not_a_conflict_is_not_retried() {
        let writes = Cell::new(0);
        let r = read_modify_write(
            "a",
            5,
            conflict,
            || async { Ok(()) },
            |()| {
                writes.set(writes.get() + 1);
                async { Err::<(), _>(E::Other) }
            },
        )
        .await;
        assert!(matches!(r, Err(Error::Failed(E::Other))));
        assert_eq!(writes.get(), 1);
    }

    #[tokio::test]
    async fn the_caller_says_what_a_conflict_is() {
        let writes = Cell::new(0);
        let r = read_modify_write(
            "a",
            5,
            |e: &E| matches!(e, E::Other),
            || async { Ok(()) },
            |()| {
                writes.set(writes.get() + 1);
                let e = if writes.get() < 3 {
                    E::Other
                } else {
                    E::Conflict(0)
                };
                async { Err::<(), _>(e) }
            },
        )
        .await;
        assert!(matches!(r, Err(Error::Failed(E::Conflict(0)))));
        assert_eq!(writes.get(), 3);
    }

    #[tokio::test]
    async fn a_read_error_ends_it_even_when_it_is_a_conflict() {
        let (reads, writes) = (Cell::new(0), Cell::new(0));
        let r = read_modify_write(
            "a",
            5,
            conflict,
            || {
                reads.set(reads.get() + 1);
                async { Err::<(), _>(E::Conflict(0)) }
            },
            |()| {
                writes.set(writes.get() + 1);
                async { Ok(()) }
            },
        )
        .await;
        assert!(matches!(r, Err(Error::Failed(E::Conflict(0)))));
        assert_eq!((reads.get(), writes.get()), (1, 0));
    }

    #[tokio::test]
    async fn zero_attempts_still_tries_once() {
        let r = read_modify_write(
            "a",
            0,
            conflict,
            || async { Ok(()) },
            |()| async { Err::<(), _>(E::Conflict(1)) },
        )
        .await;
        assert!(matches!(r, Err(Error::KeptConflicting { attempts: 1, .. })));
        assert_eq!(
            read_modify_write(
                "a",
                0,
                conflict,
                || async { Ok(1) },
                |v| async move { Ok(v + 1) }
            )
            .await
            .unwrap(),
            2
        );
    }

    #[test]
    fn into_last_is_the_callers_error() {
        assert_eq!(Error::Failed(E::Other).into_last(), E::Other);
        let kept = Error::KeptConflicting {
            object: "a".into(),
            attempts: 2,
            last: E::Conflict(2),
        };
        assert_eq!(kept.into_last(), E::Conflict(2));
    }
}
