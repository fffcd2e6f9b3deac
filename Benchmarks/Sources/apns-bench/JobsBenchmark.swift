import APNsProtocol
import Foundation
import Jobs

/// `apns-bench decode`: decode + validate of job messages (`docs/design.md §3.1`) with `JSONParser`/`JobDecoder`,
/// against Foundation's `JSONDecoder` decoding an equivalent `Codable` struct (the usual quick way),
/// measured in the same run.
enum JobsBenchmark {
    static let now: UInt32 = 1_767_000_000

    /// A realistic job: alert, badge, sound, a custom key, alerts in 2 languages, expiry, priority, campaign.
    static func job(_ i: Int) -> [UInt8] { jobAndKey(i).value }

    /// The job and its Kafka key (the token hex, `docs/design.md §3.1`). Distinct id and token per `i`.
    static func jobAndKey(_ i: Int) -> (key: [UInt8], value: [UInt8]) {
        // Pseudo-random tokens (splitmix64), as real ones are: they don't compress.
        var state = UInt64(truncatingIfNeeded: i)
        var token = ""
        for _ in 0..<4 { token += padded(String(splitmix64(&state), radix: 16), 16) }
        let value = Array(
            #"{"id":"spring-sale:\#(padded(String(i), 7))","app":"com.example.shop","token":"\#(token)","payload":{"aps":{"alert":"Spring sale: 20% off everything until Sunday","badge":1,"sound":"default"},"cid":"spring-sale"},"alerts":{"fr":"Soldes de printemps : -20 % sur tout jusqu'à dimanche","de":"Frühjahrsverkauf: 20 % auf alles bis Sonntag"},"expiry":1767225600,"priority":10,"campaign":"spring-sale"}"#
                .utf8)
        return (Array(token.utf8), value)
    }

    private static func splitmix64(_ state: inout UInt64) -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    private static func padded(_ s: String, _ width: Int) -> String {
        s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }

    static func run() {
        let distinct = 1024
        let messages = (0..<distinct).map(job)
        let datas = messages.map { Data($0) }
        let averageSize = messages.reduce(0) { $0 + $1.count } / distinct
        let decoder = JobDecoder()
        var check = 0

        // Every form decodes the same messages.
        for m in messages {
            guard (try? decoder.decode(m, now: now)) != nil, (try? CodableJob.decodeAndValidate(Data(m), now: now)) != nil
            else { fatalError("benchmark job refused: \(String(decoding: m, as: UTF8.self))") }
        }

        let foundationJobs = 100_000
        let jsonDecoder = JSONDecoder()
        let foundation = Measure.run(
            "Foundation JSONDecoder → Codable struct + same checks (baseline)", operations: foundationJobs,
            bytes: foundationJobs * averageSize
        ) {
            for i in 0..<foundationJobs {
                if let job = try? CodableJob.decodeAndValidate(datas[i % distinct], now: now, decoder: jsonDecoder) {
                    check &+= Int(job.expiry ?? 0)
                }
            }
        }

        let jobs = 400_000
        let parse = Measure.run("JSONParser.parse only (no validation)", operations: jobs, bytes: jobs * averageSize) {
            for i in 0..<jobs {
                if case .object(let members)? = try? JSONParser.parse(messages[i % distinct]) { check &+= members.count }
            }
        }
        let decode = Measure.run("JobDecoder.decode (parse + validate, size check)", operations: jobs, bytes: jobs * averageSize) {
            for i in 0..<jobs {
                if let job = try? decoder.decode(messages[i % distinct], now: now) { check &+= Int(job.expiry) }
            }
        }
        // The pipeline's path: a campaign's jobs share their payload and alerts bytes, read once.
        let templates = JobTemplates()
        let decodeTemplates = Measure.run(
            "JobDecoder.decode(templates:) (the pipeline's path: a campaign's jobs)", operations: jobs, bytes: jobs * averageSize
        ) {
            for i in 0..<jobs {
                let job = messages[i % distinct].withUnsafeBytes { raw in try? decoder.decode(raw, now: now, templates: templates) }
                if let job { check &+= Int(job.expiry) }
            }
        }
        let encoder = PayloadEncoder()
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        let decodeEncode = Measure.run(
            "JobDecoder.decode + encodedPayload(language: \"fr\", into:)", operations: jobs, bytes: jobs * averageSize
        ) {
            for i in 0..<jobs {
                out.removeAll(keepingCapacity: true)
                if let job = try? decoder.decode(messages[i % distinct], now: now) {
                    try? job.encodedPayload(language: "fr", encoder: encoder, into: &out)
                    check &+= out.count
                }
            }
        }
        Measure.table(
            "Job decode + validate (\(averageSize)-byte jobs, alerts in 2 languages)", [parse, decode, decodeTemplates, decodeEncode],
            baseline: foundation, unit: "job")
        print(
            "(checksum \(check); the baseline checks token, id, app, priority, expiry, alert types but not the payload size: it has no compact re-encoding)"
        )
    }
}

/// The same job as a `Codable` struct, as one would write it with Foundation.
struct CodableJob: Decodable {
    var id: String
    var app: String
    var token: String
    var payload: CodablePayload
    var alerts: [String: CodableAlert]?
    var expiry: UInt32?
    var priority: Int?
    var campaign: String?

    struct CodablePayload: Decodable {
        var aps: APSDictionary
        /// Custom keys need a key list known in advance with Codable (or a JSON-any type): this job's one.
        var cid: String?
    }

    struct APSDictionary: Decodable {
        var alert: CodableAlert?
        var badge: Int?
        var sound: String?
        var contentAvailable: Int?
        var category: String?
        enum CodingKeys: String, CodingKey {
            case alert, badge, sound, category
            case contentAvailable = "content-available"
        }
    }

    enum CodableAlert: Decodable {
        case text(String)
        case dictionary(AlertFields)
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let s = try? container.decode(String.self) {
                self = .text(s)
            } else {
                self = .dictionary(try container.decode(AlertFields.self))
            }
        }
    }

    struct AlertFields: Decodable {
        var title: String?
        var body: String?
        var locKey: String?
        var locArgs: [String]?
        enum CodingKeys: String, CodingKey {
            case title, body
            case locKey = "loc-key"
            case locArgs = "loc-args"
        }
    }

    struct Invalid: Error {}

    static func decodeAndValidate(_ data: Data, now: UInt32, decoder: JSONDecoder = JSONDecoder()) throws -> CodableJob {
        let job = try decoder.decode(CodableJob.self, from: data)
        _ = try DeviceToken(hex: job.token)
        guard (1...128).contains(job.id.utf8.count), !job.app.isEmpty else { throw Invalid() }
        if let p = job.priority, p != 10 && p != 5 { throw Invalid() }
        if let e = job.expiry, e != 0 && e < now { throw Invalid() }
        return job
    }
}
