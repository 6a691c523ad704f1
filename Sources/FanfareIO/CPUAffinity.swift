import CURing
import Glibc

/// Thread-per-core helpers.
public enum CPUAffinity {
    /// Pins the calling thread to one CPU.
    public static func pin(cpu: Int) throws(IOError) {
        // 1024 is glibc's CPU_SETSIZE (a GNU-only macro, so not used by name).
        guard cpu >= 0 && cpu < 1024 else {
            throw IOError(
                operation: "pin to CPU \(cpu)",
                message: "cannot pin to CPU \(cpu): CPU numbers run from 0 to \(cpuCount - 1)")
        }
        let result = capns_pin_current_thread(Int32(cpu))
        guard result == 0 else {
            throw IOError(
                operation: "pthread_setaffinity_np (CPU \(cpu))", errno: result,
                hint: result == EINVAL ? "CPU \(cpu) is not available to this process (\(cpuCount) online)" : nil)
        }
    }

    /// CPUs online.
    public static var cpuCount: Int {
        max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    }
}
