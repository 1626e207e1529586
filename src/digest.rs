//! 64-bit FNV-1a: a stable digest, the same on every machine and build, for
//! telling whether bytes seen once are still the same (never for security).

/// A running FNV-1a digest.
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Takes in `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The digest of everything written.
    pub fn finish(self) -> u64 {
        self.0
    }

    /// The digest of `bytes` alone.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut fnv = Fnv::default();
        fnv.write(bytes);
        fnv.finish()
    }
}
