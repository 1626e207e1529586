//! Building the next session before it is asked for, while sessions are used
//! in listing order.
//!
//! `grep -r`, `tar`, `rsync`, a backup agent and a shell glob such as
//! `*/transcript.md` use the sessions one after another, in the order the root
//! lists them (bash's glob goes backwards). The first use of each builds it
//! (a generated file's exact size is known only once its log is read), on the
//! request's thread with one thread decompressing ahead of it: about 1.3 of
//! two cores. When a request uses the neighbour of the session used before
//! it, the next session in that direction is built on a thread of its own, so
//! two builds overlap, and the reader finds the next one built or under way
//! (it waits for that build and never starts a second one).
//!
//! Bounded like a kernel's readahead: one session ahead, started only by a
//! use in order; the façade builds it only when it is not loaded, not being
//! built and not spilled, and after making room for it in the cache (never by
//! dropping the reader's session). It goes through the same build as a request's, so
//! it changes no byte shown, only when the work is done. `-o noreadahead`
//! turns it off.

use std::sync::Mutex;

use crate::sync::lock;

/// Which session to build ahead, from the order sessions are used in.
#[derive(Default)]
pub(super) struct ReadAhead {
    stride: Mutex<Stride>,
}

#[derive(Default)]
struct Stride {
    /// The session the last request used.
    last: Option<u32>,
    /// The session being built ahead.
    ahead: Option<u32>,
}

impl ReadAhead {
    /// Notes a request's use of session `number`: the session to build ahead
    /// (marked as being built), when this use follows its neighbour's and no
    /// other build ahead runs (one this request will join does not count).
    pub fn used(&self, number: u32) -> Option<u32> {
        let mut stride = lock(&self.stride);
        let last = stride.last.replace(number)?;
        let next = if last.checked_add(1) == Some(number) {
            number.checked_add(1)
        } else if number.checked_add(1) == Some(last) {
            number.checked_sub(1)
        } else {
            None
        }?;
        if stride.ahead.is_some_and(|ahead| ahead != number) {
            return None;
        }
        stride.ahead = Some(next);
        Some(next)
    }

    /// The build ahead of session `number` ended, or was not started.
    pub fn finished(&self, number: u32) {
        let mut stride = lock(&self.stride);
        if stride.ahead == Some(number) {
            stride.ahead = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_in_listing_order_build_the_next_session_in_that_direction() {
        let ahead = ReadAhead::default();
        assert_eq!(ahead.used(4), None, "one use is no order yet");
        assert_eq!(ahead.used(5), Some(6));
        assert_eq!(ahead.used(5), None, "a second use of one session");
        ahead.finished(6);
        let backwards = ReadAhead::default();
        backwards.used(9);
        assert_eq!(backwards.used(8), Some(7));
        backwards.finished(7);
        assert_eq!(backwards.used(0), None, "a jump is no order");
        assert_eq!(backwards.used(1), Some(2));
        let at_the_start = ReadAhead::default();
        at_the_start.used(1);
        assert_eq!(at_the_start.used(0), None, "nothing comes before session 0");
    }

    #[test]
    fn one_build_ahead_at_a_time_besides_the_one_a_request_joins() {
        let ahead = ReadAhead::default();
        ahead.used(0);
        assert_eq!(ahead.used(1), Some(2));
        // The reader reaches session 2 while it is still built ahead: it
        // joins that build, and the next one starts.
        assert_eq!(ahead.used(2), Some(3));
        // The build of 2 ending does not end 3's.
        ahead.finished(2);
        // Session 3 is still being built: a reader jumping elsewhere and on in
        // order starts nothing more.
        ahead.used(10);
        assert_eq!(ahead.used(11), None);
        ahead.finished(3);
        assert_eq!(ahead.used(12), Some(13));
    }
}
