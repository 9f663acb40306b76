//! The runtime libc and std would have provided, for a binary that has neither.
//!
//! The plugin is one short request, single-threaded from `_start` to `exit_group`, so this is
//! small:
//!
//! * `_start` (assembly) hands the kernel's initial stack pointer to [`start`], which finds
//!   the environment on it, sets the process up as std does before `main` (stdio fds open,
//!   SIGPIPE ignored), runs [`crate::main`] and exits with its status;
//! * the memory functions the compiler emits calls to (`memcpy`, `memmove`, `memset`,
//!   `memcmp`, `bcmp`), and `strlen` for `CStr::from_ptr`;
//! * stubs for the two unwinding symbols core's precompiled code refers to;
//! * the panic handler: the CNI error for an internal error on stdout, exit status 1;
//! * the global allocator: a bump allocator over a static arena.
//!
//! The only module with unsafe code; each unsafe block says why it is sound. Two system calls
//! are made here directly rather than through rustix, whose `runtime` module (the only one
//! with them) is deliberately unstable: `exit_group` and `rt_sigaction`.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ffi::CStr;
use core::fmt::{self, Write as _};
use core::panic::PanicInfo;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering::Relaxed};

use cozyplane_cni::spec::{ErrorCode, LATEST_VERSION};
use rustix::fd::{AsRawFd, BorrowedFd, IntoRawFd};

// ---- Entry and exit ----------------------------------------------------------------------

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl _start",
    ".type _start, @function",
    "_start:",
    // The outermost frame: no frame pointer to follow.
    "xor ebp, ebp",
    // The kernel's initial stack: argc, argv[argc], NULL, envp[], NULL, auxv (execve(2)).
    "mov rdi, rsp",
    // The ABI wants a 16-byte aligned stack at a call; the kernel aligns it, make sure.
    "and rsp, -16",
    "call {start}",
    "ud2",
    ".size _start, . - _start",
    start = sym start,
);

#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl _start",
    ".type _start, %function",
    "_start:",
    // The outermost frame: no frame pointer, no return address.
    "mov x29, #0",
    "mov x30, #0",
    // The kernel's initial stack (16-byte aligned): argc, argv[argc], NULL, envp[], NULL.
    "mov x0, sp",
    "bl {start}",
    "udf #0",
    ".size _start, . - _start",
    start = sym start,
);

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("cozyplane-cni's runtime (cni/bin/src/rt.rs) supports x86_64 and aarch64 only");

/// The Rust side of `_start`.
///
/// # Safety
///
/// `sp` is the initial stack pointer the kernel gave the process; called once, by `_start`.
unsafe extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: at the initial stack pointer the kernel put argc, then argc argument pointers
    // and a NULL, then the environment pointers and a NULL (execve(2); the System V ABI's
    // process initialization). So envp starts argc + 2 words above sp.
    let envp = unsafe { sp.add(*sp + 2) }.cast::<*const u8>();
    open_stdio();
    ignore_sigpipe();
    let code = crate::main(Environ(envp));
    exit(code)
}

/// The environment the kernel passed: `NAME=value` C strings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Environ(*const *const u8);

impl Environ {
    /// The entries, in order, without their NUL.
    pub(crate) fn entries(self) -> impl Iterator<Item = &'static [u8]> {
        let mut next = self.0;
        core::iter::from_fn(move || {
            // SAFETY: `next` points into the NULL-terminated array of environment pointers
            // (we stop at the NULL), which lives on our initial stack until exit.
            let entry = unsafe { *next };
            if entry.is_null() {
                return None;
            }
            // SAFETY: not past the NULL terminator, so still inside the array.
            next = unsafe { next.add(1) };
            // SAFETY: each entry is a NUL-terminated string the kernel copied to our stack;
            // nothing writes or frees it before exit.
            Some(unsafe { CStr::from_ptr(entry.cast()) }.to_bytes())
        })
    }
}

/// Standard input.
pub(crate) fn stdin() -> BorrowedFd<'static> {
    // SAFETY: fd 0 is open for the whole process: `open_stdio` opened it at start if it was
    // not, and nothing closes it (the only fds the plugin owns are the agent's socket).
    unsafe { rustix::stdio::stdin() }
}

/// Standard output.
pub(crate) fn stdout() -> BorrowedFd<'static> {
    // SAFETY: as for `stdin`, fd 1.
    unsafe { rustix::stdio::stdout() }
}

/// std's start-up opens /dev/null on whichever of fds 0, 1, 2 is closed, so that no file the
/// program opens (here, the agent's socket) becomes its stdin, stdout or stderr. Same here:
/// open returns the lowest free fd, so while it returns one of 0-2 that one was closed and is
/// kept; the first that returns 3 or more is closed again. If /dev/null cannot be opened the
/// fds are left as they are (std would abort, but only if one of them was closed).
fn open_stdio() {
    use rustix::fs::{Mode, OFlags, open};
    while let Ok(fd) = open(c"/dev/null", OFlags::RDWR, Mode::empty()) {
        if fd.as_raw_fd() > 2 {
            break; // closed when dropped
        }
        // Now stdin, stdout or stderr for the rest of the process.
        let _ = fd.into_raw_fd();
    }
}

/// std ignores SIGPIPE before `main`: writing to a socket or pipe whose reader is gone then
/// fails with EPIPE, which the plugin reports ("Broken pipe (os error 32)", code 5), instead
/// of killing it.
fn ignore_sigpipe() {
    /// The kernel's `struct sigaction` (x86_64 and aarch64 alike).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: usize,
        restorer: usize,
        mask: u64,
    }
    const SIGPIPE: usize = 13;
    const SIG_IGN: usize = 1;
    const SA_RESTART: usize = 0x1000_0000;
    let act = KernelSigaction {
        handler: SIG_IGN,
        flags: SA_RESTART,
        restorer: 0,
        mask: 1 << (SIGPIPE - 1),
    };
    // SAFETY: rt_sigaction(SIGPIPE, &act, NULL, sizeof(sigset_t)) reads `act`, which lives
    // across the call, and writes nothing of ours. Ignoring a signal installs no handler.
    // It cannot fail for SIGPIPE; if it did, the plugin would only lose the EPIPE report.
    let _ = unsafe {
        syscall4(
            sys::RT_SIGACTION,
            SIGPIPE,
            ptr::from_ref(&act).expose_provenance(),
            0,
            size_of::<u64>(),
        )
    };
}

/// End the process with `code` (only its low 8 bits reach the parent). No destructors or
/// buffers to flush: everything was written with plain write(2).
pub(crate) fn exit(code: i32) -> ! {
    // SAFETY: exit_group(code) takes an integer and does not return.
    unsafe { exit_group(code) }
}

#[cfg(target_arch = "x86_64")]
mod sys {
    pub(super) const RT_SIGACTION: usize = 13;
    pub(super) const EXIT_GROUP: usize = 231;
}

#[cfg(target_arch = "aarch64")]
mod sys {
    pub(super) const RT_SIGACTION: usize = 134;
    pub(super) const EXIT_GROUP: usize = 94;
}

/// A raw system call with four arguments; returns the kernel's result (-errno on failure).
///
/// # Safety
///
/// The call and its arguments must be sound: pointers valid for what the call does with them.
#[cfg(target_arch = "x86_64")]
unsafe fn syscall4(nr: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the call; `syscall` clobbers rcx and r11, nothing else.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn syscall4(nr: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the call; `svc 0` returns in x0 and clobbers nothing else.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") a as isize => ret,
            in("x1") b, in("x2") c, in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// # Safety
///
/// None needed beyond the process ending: exit_group never returns.
#[cfg(target_arch = "x86_64")]
unsafe fn exit_group(code: i32) -> ! {
    // SAFETY: see the function.
    unsafe {
        core::arch::asm!("syscall", in("rax") sys::EXIT_GROUP, in("rdi") code as isize, options(noreturn, nostack));
    }
}

/// # Safety
///
/// None needed beyond the process ending: exit_group never returns.
#[cfg(target_arch = "aarch64")]
unsafe fn exit_group(code: i32) -> ! {
    // SAFETY: see the function.
    unsafe {
        core::arch::asm!("svc 0", in("x8") sys::EXIT_GROUP, in("x0") code as isize, options(noreturn, nostack));
    }
}

// ---- Memory functions --------------------------------------------------------------------
//
// The compiler lowers copies, fills and comparisons to calls to these, and there is no libc
// to provide them. They must not be written as plain loops: LLVM recognises such a loop as
// the very idiom and compiles it into a call to memcpy, i.e. to itself. On x86_64 they are
// the string instructions (fast on every CPU with ERMS, i.e. since 2012); elsewhere, byte
// loops through volatile accesses, which LLVM never merges into a call.

#[cfg(target_arch = "x86_64")]
mod mem {
    use core::arch::asm;

    /// # Safety
    ///
    /// memcpy's contract: `n` bytes readable at `src`, writable at `dest`, not overlapping.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        // SAFETY: copies exactly the `n` bytes the caller vouches for, forwards (Rust code
        // runs with the direction flag clear).
        unsafe {
            asm!(
                "rep movsb",
                inout("rcx") n => _, inout("rdi") dest => _, inout("rsi") src => _,
                options(nostack, preserves_flags),
            );
        }
        dest
    }

    /// # Safety
    ///
    /// memmove's contract: `n` bytes readable at `src` and writable at `dest`; they may overlap.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        if (dest as usize).wrapping_sub(src as usize) >= n {
            // `dest` is below `src` or past its end: a forward copy never reads a byte it
            // has already overwritten.
            // SAFETY: as memcpy; the overlap is harmless in this direction.
            unsafe {
                asm!(
                    "rep movsb",
                    inout("rcx") n => _, inout("rdi") dest => _, inout("rsi") src => _,
                    options(nostack, preserves_flags),
                );
            }
        } else {
            // `dest` is inside `src..src + n` (so n > 0): copy backwards from the last byte,
            // with the direction flag set for the copy and cleared again after it.
            // SAFETY: the same `n` bytes, last first; `n - 1` does not underflow.
            unsafe {
                asm!(
                    "std",
                    "rep movsb",
                    "cld",
                    inout("rcx") n => _,
                    inout("rdi") dest.add(n - 1) => _,
                    inout("rsi") src.add(n - 1) => _,
                    options(nostack),
                );
            }
        }
        dest
    }

    /// # Safety
    ///
    /// memset's contract: `n` bytes writable at `dest`.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
        // SAFETY: writes exactly the `n` bytes the caller vouches for.
        unsafe {
            asm!(
                "rep stosb",
                inout("rcx") n => _, inout("rdi") dest => _, in("al") c as u8,
                options(nostack, preserves_flags),
            );
        }
        dest
    }

    /// # Safety
    ///
    /// memcmp's contract: `n` bytes readable at `a` and at `b`.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        if n == 0 {
            return 0;
        }
        let (a_end, b_end): (*const u8, *const u8);
        // SAFETY: `repe cmpsb` reads pairs of bytes until one differs or `n` were compared,
        // within the `n` bytes the caller vouches for.
        unsafe {
            asm!(
                "repe cmpsb",
                inout("rsi") a => a_end, inout("rdi") b => b_end, inout("rcx") n => _,
                options(nostack, readonly),
            );
        }
        // The last pair compared is the first that differs, or the last pair if none does.
        // SAFETY: at least one pair was compared, so both pointers moved past a byte of theirs.
        let (x, y) = unsafe { (*a_end.sub(1), *b_end.sub(1)) };
        i32::from(x) - i32::from(y)
    }

    /// # Safety
    ///
    /// As memcmp.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: the same contract.
        unsafe { memcmp(a, b, n) }
    }

    /// # Safety
    ///
    /// `s` is a NUL-terminated string.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn strlen(s: *const u8) -> usize {
        let end: *const u8;
        // SAFETY: `repne scasb` reads bytes from `s` up to and including the NUL the caller
        // vouches for.
        unsafe {
            asm!(
                "repne scasb",
                inout("rdi") s => end, inout("rcx") usize::MAX => _, in("al") 0u8,
                options(nostack, readonly),
            );
        }
        // `end` is one past the NUL.
        end.addr() - s.addr() - 1
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod mem {
    /// # Safety
    ///
    /// memcpy's contract: `n` bytes readable at `src`, writable at `dest`, not overlapping.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        for i in 0..n {
            // SAFETY: `i < n`, within what the caller vouches for.
            unsafe { dest.add(i).write_volatile(src.add(i).read_volatile()) };
        }
        dest
    }

    /// # Safety
    ///
    /// memmove's contract: `n` bytes readable at `src` and writable at `dest`; they may overlap.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        if (dest as usize).wrapping_sub(src as usize) >= n {
            // `dest` is below `src` or past its end: forwards is safe.
            for i in 0..n {
                // SAFETY: `i < n`.
                unsafe { dest.add(i).write_volatile(src.add(i).read_volatile()) };
            }
        } else {
            // `dest` is inside `src..src + n`: backwards, last byte first.
            for i in (0..n).rev() {
                // SAFETY: `i < n`.
                unsafe { dest.add(i).write_volatile(src.add(i).read_volatile()) };
            }
        }
        dest
    }

    /// # Safety
    ///
    /// memset's contract: `n` bytes writable at `dest`.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
        for i in 0..n {
            // SAFETY: `i < n`.
            unsafe { dest.add(i).write_volatile(c as u8) };
        }
        dest
    }

    /// # Safety
    ///
    /// memcmp's contract: `n` bytes readable at `a` and at `b`.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        for i in 0..n {
            // SAFETY: `i < n`.
            let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
            if x != y {
                return i32::from(x) - i32::from(y);
            }
        }
        0
    }

    /// # Safety
    ///
    /// As memcmp.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: the same contract.
        unsafe { memcmp(a, b, n) }
    }

    /// # Safety
    ///
    /// `s` is a NUL-terminated string.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn strlen(s: *const u8) -> usize {
        let mut n = 0;
        // SAFETY: up to and including the NUL the caller vouches for.
        while unsafe { s.add(n).read_volatile() } != 0 {
            n += 1;
        }
        n
    }
}

/// On aarch64, compiler_builtins' CPU-feature detection (whether the outlined atomics may use
/// LSE instructions) asks `getauxval` from a constructor that libc would run from
/// `.init_array`. This runtime runs no constructors, so nothing calls it, but the link needs
/// the symbol. 0 is getauxval's "not present": the atomics keep their baseline LL/SC
/// sequences, which are correct on every aarch64 CPU.
#[cfg(target_arch = "aarch64")]
#[unsafe(no_mangle)]
extern "C" fn getauxval(_kind: core::ffi::c_ulong) -> core::ffi::c_ulong {
    0
}

// ---- Panics ------------------------------------------------------------------------------

/// Never called. core and alloc come precompiled with `panic = "unwind"`, so their cleanup
/// landing pads refer to `_Unwind_Resume` and the personality routine, and the link needs the
/// symbols. Nothing ever unwinds here: this binary is built with `panic = "abort"` and the
/// panic handler below exits, so no landing pad is entered. If one were, exit as for a panic.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
extern "C" fn _Unwind_Resume(_exception: *mut u8) -> ! {
    internal_error(None)
}

/// Never called; see `_Unwind_Resume`.
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() -> ! {
    internal_error(None)
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    internal_error(Some(info))
}

/// Print CNI error 999 on stdout and exit 1: what kubelet gets instead of a crash. Writes
/// from a stack buffer, no allocation (the panic may be the allocator's), and a panic while
/// doing so (it cannot, but) exits at once instead of recursing.
fn internal_error(info: Option<&PanicInfo<'_>>) -> ! {
    static REPORTING: AtomicBool = AtomicBool::new(false);
    if !REPORTING.swap(true, Relaxed) {
        let mut out = Line::new();
        let _ = write!(
            out,
            r#"{{"cniVersion":"{LATEST_VERSION}","code":{},"msg":"internal error in cozyplane-cni","details":""#,
            ErrorCode::Internal.code()
        );
        let _ = match info {
            Some(info) => write!(Escaped(&mut out), "{info}"),
            None => Escaped(&mut out).write_str("unwinding is not supported"),
        };
        let bytes = out.finish();
        let mut rest = bytes;
        // One write, two if interrupted; no loop that could spin.
        for _ in 0..2 {
            match rustix::io::write(stdout(), rest) {
                Ok(n) if n < rest.len() => rest = &rest[n..],
                Err(rustix::io::Errno::INTR) => {}
                _ => break,
            }
        }
    }
    exit(1)
}

/// A line of JSON on the stack, cut short (at a character boundary) rather than overflowed.
struct Line {
    bytes: [u8; 1024],
    len: usize,
}

impl Line {
    /// Room kept for the closing `"}` and the newline.
    const TAIL: &[u8] = b"\"}\n";

    fn new() -> Self {
        Self {
            bytes: [0; 1024],
            len: 0,
        }
    }

    /// Append all of `s`, or nothing if it does not fit.
    fn push(&mut self, s: &[u8]) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() - Self::TAIL.len() {
            return Err(fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s);
        self.len = end;
        Ok(())
    }

    /// The line with its tail.
    fn finish(&mut self) -> &[u8] {
        let end = self.len + Self::TAIL.len();
        self.bytes[self.len..end].copy_from_slice(Self::TAIL);
        &self.bytes[..end]
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes())
    }
}

/// Writes into a [`Line`] as the inside of a JSON string.
struct Escaped<'a>(&'a mut Line);

impl fmt::Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for c in s.chars() {
            match c {
                '"' => self.0.push(b"\\\"")?,
                '\\' => self.0.push(b"\\\\")?,
                '\n' => self.0.push(b"\\n")?,
                c if u32::from(c) < 0x20 => {
                    let b = c as u8;
                    let esc = [
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 15)],
                    ];
                    self.0.push(&esc)?;
                }
                c => self.0.push(c.encode_utf8(&mut [0; 4]).as_bytes())?,
            }
        }
        Ok(())
    }
}

// ---- Heap --------------------------------------------------------------------------------

/// Bytes of the static arena: the plugin's whole heap for any real request (a few KiB of
/// config, parsed twice, and the agent's answer), and still 8 times the largest message.
const ARENA_SIZE: usize = 8 * cozyplane_cni::proto::MAX_MESSAGE;

/// Each further chunk mapped when the arena is used up: only a pathological (but allowed)
/// input, e.g. a megabyte of tiny JSON objects, gets there.
const CHUNK_SIZE: usize = 16 << 20;

/// The static arena: zero pages in .bss, which the kernel maps only when first touched, so
/// its size costs nothing up front.
#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; ARENA_SIZE]>);

// SAFETY: the process has one thread, and the arena's bytes are reached only through the
// disjoint blocks the allocator hands out.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_SIZE]));

/// A bump allocator: blocks are carved off the front of the free space and never reused; the
/// plugin is one short request and exits. The exception is the newest block, which grows in
/// place (a `Vec` being filled) and is given back when freed. When the free space is too
/// small, a new chunk is mapped from the kernel (the rest of the old one is left unused); when
/// the kernel refuses, allocation returns null, which alloc turns into a panic, i.e. CNI
/// error 999.
///
/// The fields are atomics only because a `static` must be `Sync`; with one thread, relaxed
/// loads and stores are plain reads and writes.
struct Bump {
    /// Start of the free space (null until the first allocation).
    next: AtomicPtr<u8>,
    /// End of the free space.
    end: AtomicPtr<u8>,
    /// The newest block, if it has not been freed.
    last: AtomicPtr<u8>,
}

#[global_allocator]
static HEAP: Bump = Bump {
    next: AtomicPtr::new(ptr::null_mut()),
    end: AtomicPtr::new(ptr::null_mut()),
    last: AtomicPtr::new(ptr::null_mut()),
};

impl Bump {
    /// A block for `layout` from the free space, or None if it does not fit.
    fn carve(&self, layout: Layout) -> Option<*mut u8> {
        let next = self.next.load(Relaxed);
        let end = self.end.load(Relaxed);
        if next.is_null() {
            return None;
        }
        let pad = next.addr().wrapping_neg() & (layout.align() - 1);
        let room = end.addr() - next.addr();
        if pad.checked_add(layout.size())? > room {
            return None;
        }
        let block = next.wrapping_add(pad);
        self.next.store(block.wrapping_add(layout.size()), Relaxed);
        self.last.store(block, Relaxed);
        Some(block)
    }

    /// Make the free space a new region of at least `layout`'s size: the static arena the
    /// first time, a mapped chunk after.
    fn refill(&self, layout: Layout) -> Option<()> {
        let (start, len) = if self.next.load(Relaxed).is_null() {
            (ARENA.0.get().cast::<u8>(), ARENA_SIZE)
        } else {
            use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
            let len = layout.size().checked_add(layout.align())?.max(CHUNK_SIZE);
            // SAFETY: a fresh private anonymous mapping at an address the kernel picks
            // overlaps nothing; it stays mapped until exit.
            let p = unsafe {
                mmap_anonymous(
                    ptr::null_mut(),
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE,
                )
            }
            .ok()?;
            (p.cast::<u8>(), len)
        };
        self.next.store(start, Relaxed);
        self.end.store(start.wrapping_add(len), Relaxed);
        self.last.store(ptr::null_mut(), Relaxed);
        Some(())
    }
}

// SAFETY: blocks are carved from free space that no other block covers, aligned as asked, and
// at least `layout.size()` long; `realloc` grows a block in place only into free space.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(p) = self.carve(layout) {
            return p;
        }
        match self.refill(layout) {
            Some(()) => self.carve(layout).unwrap_or(ptr::null_mut()),
            None => ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        if ptr == self.last.load(Relaxed) {
            self.next.store(ptr, Relaxed);
            self.last.store(ptr::null_mut(), Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ptr == self.last.load(Relaxed) && new_size <= self.end.load(Relaxed).addr() - ptr.addr() {
            self.next.store(ptr.wrapping_add(new_size), Relaxed);
            return ptr;
        }
        // SAFETY: `layout.align()` is a valid alignment, and the caller guarantees that
        // `new_size` rounded up to it does not overflow (realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (realloc's contract).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: the old block is `layout.size()` readable bytes, the new one `new_size`
            // writable bytes, and they are disjoint (the new one was carved from free space).
            unsafe { ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
        }
        new
    }
}
