//! The I/O error the plugin reports, without std: a kind that decides the CNI error code and
//! the text the user sees.
//!
//! The std build ([`crate::plugin::UnixTransport`]) converts `std::io::Error` into it; the
//! no-libc binary builds it from the raw errno with [`IoError::from_errno`], whose text is
//! the same as std's `Display` on glibc (`"No such file or directory (os error 2)"`), so the
//! error details kubelet logs did not change when the binary lost libc.

use alloc::borrow::Cow;
use alloc::format;
use core::fmt;

/// The few kinds the plugin tells apart (see `plugin::dispatch` for the CNI codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IoErrorKind {
    /// `ENOENT`: no such file (for the agent's socket: the agent is not running).
    NotFound,
    /// `ECONNREFUSED`: nothing listens on the socket (the agent is down).
    ConnectionRefused,
    /// `ETIMEDOUT`.
    TimedOut,
    /// `EAGAIN`/`EWOULDBLOCK`: for a socket with `SO_RCVTIMEO`/`SO_SNDTIMEO`, the timeout.
    WouldBlock,
    /// `EINTR`: the call was interrupted and may be retried.
    Interrupted,
    /// An argument was invalid before any system call (e.g. a socket path too long).
    InvalidInput,
    /// Anything else.
    Other,
}

impl IoErrorKind {
    /// The kind of a raw errno, as `std::io::Error::kind` classifies it (for the kinds above).
    pub const fn from_errno(errno: i32) -> Self {
        match errno {
            ENOENT => Self::NotFound,
            ECONNREFUSED => Self::ConnectionRefused,
            ETIMEDOUT => Self::TimedOut,
            EAGAIN => Self::WouldBlock,
            EINTR => Self::Interrupted,
            EINVAL => Self::InvalidInput,
            _ => Self::Other,
        }
    }
}

// The errno values the kinds are made of (Linux's asm-generic numbering, which x86_64 and
// aarch64 use).
const EINTR: i32 = 4;
const ENOENT: i32 = 2;
const EAGAIN: i32 = 11;
const EINVAL: i32 = 22;
const ECONNREFUSED: i32 = 111;
const ETIMEDOUT: i32 = 110;

/// An I/O failure: its kind, the errno if it came from the kernel, and the text to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoError {
    kind: IoErrorKind,
    errno: Option<i32>,
    text: Cow<'static, str>,
}

impl IoError {
    /// An error that did not come from a system call.
    pub fn new(kind: IoErrorKind, text: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            errno: None,
            text: text.into(),
        }
    }

    /// The error for a failed system call's errno, printed as std prints it on glibc.
    pub fn from_errno(errno: i32) -> Self {
        let text = match usize::try_from(errno).ok().and_then(|i| STRERROR.get(i)) {
            Some(s) if !s.is_empty() => format!("{s} (os error {errno})"),
            _ => format!("Unknown error {errno} (os error {errno})"),
        };
        Self {
            kind: IoErrorKind::from_errno(errno),
            errno: Some(errno),
            text: text.into(),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> IoErrorKind {
        self.kind
    }

    /// The errno, if the error came from a system call.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl core::error::Error for IoError {}

#[cfg(feature = "std")]
impl From<std::io::Error> for IoError {
    fn from(e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e.kind() {
            K::NotFound => IoErrorKind::NotFound,
            K::ConnectionRefused => IoErrorKind::ConnectionRefused,
            K::TimedOut => IoErrorKind::TimedOut,
            K::WouldBlock => IoErrorKind::WouldBlock,
            K::Interrupted => IoErrorKind::Interrupted,
            K::InvalidInput => IoErrorKind::InvalidInput,
            _ => IoErrorKind::Other,
        };
        Self {
            kind,
            errno: e.raw_os_error(),
            text: e.to_string().into(),
        }
    }
}

/// glibc's `strerror` texts by errno (Linux's asm-generic numbering); empty where glibc says
/// "Unknown error N". The old binary printed these through std and glibc; the test below
/// checks the table against std on the build machine.
const STRERROR: [&str; 134] = [
    "Success",                                           // 0
    "Operation not permitted",                           // 1
    "No such file or directory",                         // 2
    "No such process",                                   // 3
    "Interrupted system call",                           // 4
    "Input/output error",                                // 5
    "No such device or address",                         // 6
    "Argument list too long",                            // 7
    "Exec format error",                                 // 8
    "Bad file descriptor",                               // 9
    "No child processes",                                // 10
    "Resource temporarily unavailable",                  // 11
    "Cannot allocate memory",                            // 12
    "Permission denied",                                 // 13
    "Bad address",                                       // 14
    "Block device required",                             // 15
    "Device or resource busy",                           // 16
    "File exists",                                       // 17
    "Invalid cross-device link",                         // 18
    "No such device",                                    // 19
    "Not a directory",                                   // 20
    "Is a directory",                                    // 21
    "Invalid argument",                                  // 22
    "Too many open files in system",                     // 23
    "Too many open files",                               // 24
    "Inappropriate ioctl for device",                    // 25
    "Text file busy",                                    // 26
    "File too large",                                    // 27
    "No space left on device",                           // 28
    "Illegal seek",                                      // 29
    "Read-only file system",                             // 30
    "Too many links",                                    // 31
    "Broken pipe",                                       // 32
    "Numerical argument out of domain",                  // 33
    "Numerical result out of range",                     // 34
    "Resource deadlock avoided",                         // 35
    "File name too long",                                // 36
    "No locks available",                                // 37
    "Function not implemented",                          // 38
    "Directory not empty",                               // 39
    "Too many levels of symbolic links",                 // 40
    "",                                                  // 41
    "No message of desired type",                        // 42
    "Identifier removed",                                // 43
    "Channel number out of range",                       // 44
    "Level 2 not synchronized",                          // 45
    "Level 3 halted",                                    // 46
    "Level 3 reset",                                     // 47
    "Link number out of range",                          // 48
    "Protocol driver not attached",                      // 49
    "No CSI structure available",                        // 50
    "Level 2 halted",                                    // 51
    "Invalid exchange",                                  // 52
    "Invalid request descriptor",                        // 53
    "Exchange full",                                     // 54
    "No anode",                                          // 55
    "Invalid request code",                              // 56
    "Invalid slot",                                      // 57
    "",                                                  // 58
    "Bad font file format",                              // 59
    "Device not a stream",                               // 60
    "No data available",                                 // 61
    "Timer expired",                                     // 62
    "Out of streams resources",                          // 63
    "Machine is not on the network",                     // 64
    "Package not installed",                             // 65
    "Object is remote",                                  // 66
    "Link has been severed",                             // 67
    "Advertise error",                                   // 68
    "Srmount error",                                     // 69
    "Communication error on send",                       // 70
    "Protocol error",                                    // 71
    "Multihop attempted",                                // 72
    "RFS specific error",                                // 73
    "Bad message",                                       // 74
    "Value too large for defined data type",             // 75
    "Name not unique on network",                        // 76
    "File descriptor in bad state",                      // 77
    "Remote address changed",                            // 78
    "Can not access a needed shared library",            // 79
    "Accessing a corrupted shared library",              // 80
    ".lib section in a.out corrupted",                   // 81
    "Attempting to link in too many shared libraries",   // 82
    "Cannot exec a shared library directly",             // 83
    "Invalid or incomplete multibyte or wide character", // 84
    "Interrupted system call should be restarted",       // 85
    "Streams pipe error",                                // 86
    "Too many users",                                    // 87
    "Socket operation on non-socket",                    // 88
    "Destination address required",                      // 89
    "Message too long",                                  // 90
    "Protocol wrong type for socket",                    // 91
    "Protocol not available",                            // 92
    "Protocol not supported",                            // 93
    "Socket type not supported",                         // 94
    "Operation not supported",                           // 95
    "Protocol family not supported",                     // 96
    "Address family not supported by protocol",          // 97
    "Address already in use",                            // 98
    "Cannot assign requested address",                   // 99
    "Network is down",                                   // 100
    "Network is unreachable",                            // 101
    "Network dropped connection on reset",               // 102
    "Software caused connection abort",                  // 103
    "Connection reset by peer",                          // 104
    "No buffer space available",                         // 105
    "Transport endpoint is already connected",           // 106
    "Transport endpoint is not connected",               // 107
    "Cannot send after transport endpoint shutdown",     // 108
    "Too many references: cannot splice",                // 109
    "Connection timed out",                              // 110
    "Connection refused",                                // 111
    "Host is down",                                      // 112
    "No route to host",                                  // 113
    "Operation already in progress",                     // 114
    "Operation now in progress",                         // 115
    "Stale file handle",                                 // 116
    "Structure needs cleaning",                          // 117
    "Not a XENIX named type file",                       // 118
    "No XENIX semaphores available",                     // 119
    "Is a named type file",                              // 120
    "Remote I/O error",                                  // 121
    "Disk quota exceeded",                               // 122
    "No medium found",                                   // 123
    "Wrong medium type",                                 // 124
    "Operation canceled",                                // 125
    "Required key not available",                        // 126
    "Key has expired",                                   // 127
    "Key has been revoked",                              // 128
    "Key was rejected by service",                       // 129
    "Owner died",                                        // 130
    "State not recoverable",                             // 131
    "Operation not possible due to RF-kill",             // 132
    "Memory page has hardware error",                    // 133
];

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Every errno prints and classifies as std (over glibc) does.
    #[test]
    fn errno_text_and_kind_match_std() {
        for errno in (1..=140).chain([200, 4095]) {
            let ours = IoError::from_errno(errno);
            let std = std::io::Error::from_raw_os_error(errno);
            assert_eq!(ours.to_string(), std.to_string(), "errno {errno}");
            let converted = IoError::from(std);
            assert_eq!(ours.kind(), converted.kind(), "errno {errno}");
            assert_eq!(ours, converted, "errno {errno}");
        }
    }

    #[test]
    fn plain_errors_print_their_text() {
        let e = IoError::new(IoErrorKind::InvalidInput, "path must be shorter than SUN_LEN");
        assert_eq!(e.to_string(), "path must be shorter than SUN_LEN");
        assert_eq!((e.kind(), e.raw_os_error()), (IoErrorKind::InvalidInput, None));
    }
}
