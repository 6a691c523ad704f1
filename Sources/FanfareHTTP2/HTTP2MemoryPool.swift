import CNghttp2
import Glibc

/// A per-thread slab allocator handed to nghttp2 (`nghttp2_session_*_new3`), so its per-stream objects
/// (stream state, copied header arrays, outbound items, frames) come from free lists instead of malloc.
///
/// Blocks come in power-of-two size classes from 32 bytes to 32 KiB, carved from 256 KiB slabs that are kept
/// for the pool's lifetime; freed blocks go back to their class's free list. After warm-up the steady state
/// allocates nothing. Larger requests go to malloc. Not thread-safe: one pool per worker thread, used only by
/// the sessions of that thread.
public final class HTTP2MemoryPool {
    static let classCount = 11                 // 32 << 0 ... 32 << 10 = 32 KiB
    static let minimumShift = 5
    static let headerSize = 16                 // keeps payloads 16-byte aligned
    static let slabSize = 256 * 1024
    static let largeClass: UInt32 = 0xFFFF

    private let freeLists: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    @exclusivity(unchecked) private var slabs: [UnsafeMutableRawPointer] = []
    @exclusivity(unchecked) private var slabCursor: UnsafeMutableRawPointer?
    @exclusivity(unchecked) private var slabRemaining = 0
    /// Blocks handed out and not yet returned (for tests and leak checks).
    @exclusivity(unchecked) public private(set) var outstandingBlocks = 0
    /// Times the pool had to get memory from the system (slabs and large blocks).
    @exclusivity(unchecked) public private(set) var systemAllocations = 0

    /// The table nghttp2 calls through; `mem_user_data` points back at this pool.
    public let allocator: UnsafeMutablePointer<nghttp2_mem>

    public init() {
        freeLists = .allocate(capacity: Self.classCount)
        freeLists.initialize(repeating: nil, count: Self.classCount)
        allocator = .allocate(capacity: 1)
        allocator.initialize(
            to: nghttp2_mem(
                mem_user_data: nil, malloc: poolMalloc, free: poolFree, calloc: poolCalloc, realloc: poolRealloc))
        allocator.pointee.mem_user_data = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit {
        // Sessions using the pool must be deleted first (their owners free them before the pool goes).
        for slab in slabs { free(slab) }
        freeLists.deallocate()
        allocator.deallocate()
    }

    @inline(__always)
    static func sizeClass(for size: Int) -> Int? {
        if size <= 32 { return 0 }
        let shift = Int.bitWidth - (size - 1).leadingZeroBitCount  // ceil(log2(size))
        let index = shift - minimumShift
        return index < classCount ? index : nil
    }

    func allocate(_ size: Int) -> UnsafeMutableRawPointer? {
        guard let index = Self.sizeClass(for: size) else {
            systemAllocations += 1
            guard let raw = malloc(size + Self.headerSize) else { return nil }
            raw.storeBytes(of: Self.largeClass, as: UInt32.self)
            raw.storeBytes(of: UInt64(size), toByteOffset: 8, as: UInt64.self)
            outstandingBlocks += 1
            return raw + Self.headerSize
        }
        outstandingBlocks += 1
        if let block = freeLists[index] {
            freeLists[index] = block.load(fromByteOffset: Self.headerSize, as: UnsafeMutableRawPointer?.self)
            return block + Self.headerSize
        }
        let blockSize = (1 << (index + Self.minimumShift)) + Self.headerSize
        if slabRemaining < blockSize {
            systemAllocations += 1
            guard let slab = malloc(Self.slabSize) else { return nil }
            slabs.append(slab)
            slabCursor = slab
            slabRemaining = Self.slabSize
        }
        let block = slabCursor!
        slabCursor = block + blockSize
        slabRemaining -= blockSize
        block.storeBytes(of: UInt32(index), as: UInt32.self)
        return block + Self.headerSize
    }

    func release(_ pointer: UnsafeMutableRawPointer?) {
        guard let pointer else { return }
        let block = pointer - Self.headerSize
        let index = block.load(as: UInt32.self)
        outstandingBlocks -= 1
        assert(outstandingBlocks >= 0)
        if index == Self.largeClass {
            free(block)
            return
        }
        assert(Int(index) < Self.classCount, "freeing a block this pool did not allocate")
        block.storeBytes(of: freeLists[Int(index)], toByteOffset: Self.headerSize, as: UnsafeMutableRawPointer?.self)
        freeLists[Int(index)] = block
    }

    /// Usable bytes of a block (header: class index, then the byte count for large blocks).
    func capacity(of pointer: UnsafeMutableRawPointer) -> Int {
        let header = pointer - Self.headerSize
        let index = header.load(as: UInt32.self)
        if index == Self.largeClass { return Int(header.load(fromByteOffset: 8, as: UInt64.self)) }
        return 1 << (Int(index) + Self.minimumShift)
    }

    func reallocate(_ pointer: UnsafeMutableRawPointer?, _ size: Int) -> UnsafeMutableRawPointer? {
        guard let pointer else { return allocate(size) }
        let current = capacity(of: pointer)
        if size <= current { return pointer }
        guard let grown = allocate(size) else { return nil }
        grown.copyMemory(from: pointer, byteCount: current)
        release(pointer)
        return grown
    }
}

/// Calls `body` with the pool behind `mem_user_data` without retaining it (the sessions that call this are
/// deleted before their pool; a retain/release pair per nghttp2 allocation was a measurable share of CPU).
@inline(__always)
private func withPool<R>(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP2MemoryPool) -> R) -> R {
    Unmanaged<HTTP2MemoryPool>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
}

private func poolMalloc(_ size: Int, _ userData: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    withPool(userData) { $0.allocate(size) }
}

private func poolFree(_ pointer: UnsafeMutableRawPointer?, _ userData: UnsafeMutableRawPointer?) {
    withPool(userData) { $0.release(pointer) }
}

private func poolCalloc(_ count: Int, _ size: Int, _ userData: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let total = count.multipliedReportingOverflow(by: size)
    guard !total.overflow, let pointer = withPool(userData, { $0.allocate(total.partialValue) }) else { return nil }
    memset(pointer, 0, total.partialValue)
    return pointer
}

private func poolRealloc(_ pointer: UnsafeMutableRawPointer?, _ size: Int, _ userData: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    withPool(userData) { $0.reallocate(pointer, size) }
}
