import CURing
import Glibc

/// Which io_uring setup flags to ask for.
public enum IORingSetup: Sendable {
    /// Plain flags (CQSIZE only): the fastest measured here for request/response traffic (see RingSetup.create).
    case automatic
    /// SINGLE_ISSUER + COOP_TASKRUN (6.0), else COOP_TASKRUN (5.19), else plain. Each step down happens only
    /// when the kernel rejects the flags with EINVAL.
    case cooperative
    /// Try SINGLE_ISSUER + DEFER_TASKRUN (6.1) first, then as `automatic` (opt-in: see RingSetup.create).
    case deferTaskrun
    /// Skip SINGLE_ISSUER and DEFER_TASKRUN (what a 5.19/6.0 kernel gets); for tests and comparisons.
    case compatible
    /// CQSIZE only: the most widely supported ring.
    case plain
}

/// What `io_uring_queue_init_params` gave us.
struct RingConfiguration {
    var flags: UInt32
    var features: UInt32
    var submissionEntries: UInt32
    var completionEntries: UInt32
    var ringFDRegistered: Bool
    var summary: String
}

enum RingSetup {
    private struct Attempt {
        var flags: UInt32
        var name: String
    }

    /// Creates the ring in `ring`, stepping down through the flag sets. On error the ring is not set up.
    static func create(
        ring: UnsafeMutablePointer<io_uring>, entries: UInt32, setup: IORingSetup
    ) throws(IOError) -> RingConfiguration {
        let sizing = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP
        let best = Attempt(
            flags: IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
            name: "SINGLE_ISSUER+DEFER_TASKRUN")
        let singleIssuerCoop = Attempt(
            flags: IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
            name: "SINGLE_ISSUER+COOP_TASKRUN")
        let coop = Attempt(flags: IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN, name: "COOP_TASKRUN")
        let plain = Attempt(flags: 0, name: "plain")
        let attempts: [Attempt]
        // FANFARE_RING_SETUP=automatic|compatible|plain overrides the caller (for comparisons on a given kernel).
        var setup = setup
        switch getenv("FANFARE_RING_SETUP").map({ String(cString: $0) }) {
        case "compatible": setup = .compatible
        case "plain": setup = .plain
        case "automatic": setup = .automatic
        case "cooperative": setup = .cooperative
        case "defer": setup = .deferTaskrun
        default: break
        }
        switch setup {
        // Task-run modes are opt-in. Measured here (kernel 6.18, loopback TLS + HTTP/2, one connection x 100
        // streams, 3 runs each): plain 42-51k pushes/s; SINGLE_ISSUER+COOP_TASKRUN 26-30k; COOP_TASKRUN 13-32k;
        // DEFER_TASKRUN 14-27k. Deferred or cooperative task work delays socket completions until the next
        // kernel entry, which in a request/response ping-pong shows up as idle time on both ends.
        case .automatic: attempts = [plain]
        case .cooperative: attempts = [singleIssuerCoop, coop, plain]
        case .deferTaskrun: attempts = [best, singleIssuerCoop, coop, plain]
        case .compatible: attempts = [coop, plain]
        case .plain: attempts = [plain]
        }

        for attempt in attempts {
            var params = io_uring_params()
            params.flags = attempt.flags | sizing
            // "Very important to never overflow the CQ ring" (liburing proxy.c): 4x the SQ.
            params.cq_entries = entries &* 4
            let result = io_uring_queue_init_params(entries, ring, &params)
            if result == -EINVAL { continue }  // flags this kernel does not know: step down
            guard result == 0 else {
                throw IOError(
                    operation: "io_uring_queue_init_params (\(entries) entries, \(attempt.name))",
                    errno: -result, hint: hint(forSetupErrno: -result))
            }
            do throws(IOError) {
                try checkFeatures(params.features)
                try probeOpcodes(ring)
            } catch {
                io_uring_queue_exit(ring)
                throw error
            }
            // Saves the fd lookup on every io_uring_enter (5.18+); optional.
            let registered = io_uring_register_ring_fd(ring) == 1
            let summary =
                "io_uring \(params.sq_entries)/\(params.cq_entries) entries, \(attempt.name)"
                + (registered ? ", registered ring fd" : "")
            return RingConfiguration(
                flags: params.flags, features: params.features,
                submissionEntries: params.sq_entries, completionEntries: params.cq_entries,
                ringFDRegistered: registered, summary: summary)
        }
        throw IOError(
            operation: "io_uring_queue_init_params",
            errno: EINVAL, hint: "the kernel rejected even a plain ring of \(entries) entries; try fewer entries")
    }

    private static func hint(forSetupErrno code: Int32) -> String? {
        switch code {
        case EPERM:
            return
                "io_uring is disabled here: check the kernel.io_uring_disabled sysctl, or the container's seccomp profile (Docker's default blocks io_uring)"
        case ENOMEM:
            return "not enough locked memory for the ring: raise RLIMIT_MEMLOCK (ulimit -l) or use fewer entries"
        case ENOSYS:
            return "this kernel has no io_uring (Linux 6.1 or newer is required)"
        case EMFILE, ENFILE:
            return "out of file descriptors: raise the open-files limit (ulimit -n)"
        default:
            return nil
        }
    }

    /// The loop relies on these: NODROP (no lost CQEs), SUBMIT_STABLE (buffers such as a connect address
    /// are copied by the kernel at submission) and EXT_ARG (wait with a timeout, no timeout SQE).
    private static func checkFeatures(_ features: UInt32) throws(IOError) {
        let required: [(UInt32, String)] = [
            (IORING_FEAT_NODROP, "NODROP"),
            (IORING_FEAT_SUBMIT_STABLE, "SUBMIT_STABLE"),
            (IORING_FEAT_EXT_ARG, "EXT_ARG"),
            (IORING_FEAT_FAST_POLL, "FAST_POLL"),
        ]
        let missing = required.filter { features & $0.0 == 0 }.map(\.1)
        guard missing.isEmpty else {
            throw IOError(
                operation: "io_uring feature check",
                message:
                    "this kernel's io_uring lacks \(missing.joined(separator: ", ")); Linux 6.1 or newer is required")
        }
    }

    /// Every opcode the loop prepares must be known to the kernel.
    private static func probeOpcodes(_ ring: UnsafeMutablePointer<io_uring>) throws(IOError) {
        guard let probe = io_uring_get_probe_ring(ring) else {
            throw IOError(
                operation: "io_uring_get_probe_ring",
                message: "cannot probe io_uring opcodes (Linux 6.1 or newer is required)")
        }
        defer { io_uring_free_probe(probe) }
        let needed: [(io_uring_op, String)] = [
            (IORING_OP_CONNECT, "CONNECT"), (IORING_OP_ACCEPT, "ACCEPT"), (IORING_OP_RECV, "RECV"),
            (IORING_OP_SEND, "SEND"), (IORING_OP_CLOSE, "CLOSE"), (IORING_OP_ASYNC_CANCEL, "ASYNC_CANCEL"),
            (IORING_OP_READ, "READ"),
        ]
        let missing = needed.filter { io_uring_opcode_supported(probe, Int32($0.0.rawValue)) == 0 }.map(\.1)
        guard missing.isEmpty else {
            throw IOError(
                operation: "io_uring opcode probe",
                message:
                    "this kernel's io_uring lacks \(missing.joined(separator: ", ")); Linux 6.1 or newer is required")
        }
    }
}
