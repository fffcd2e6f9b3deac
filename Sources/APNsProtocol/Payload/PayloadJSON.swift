/// Payload ⇄ JSON.
extension Payload {
    /// Reads a payload from JSON, checking the type of every key Tables 3-1 and 3-2 define.
    public init(json: JSONValue) throws(PayloadError) {
        guard let members = json.objectValue else { throw .invalid(path: "", expected: "a JSON object") }
        var aps: APS?
        var custom: [CustomKey] = []
        for (key, value) in members {
            if key == "aps" {
                aps = try APS(json: value)
            } else {
                custom.append(CustomKey(key, value))
            }
        }
        guard let aps else { throw .invalid(path: "aps", expected: "an aps dictionary") }
        self.init(aps: aps, custom: custom)
    }

    /// The payload as a JSON value: `aps` first, its keys in Table 3-1 order, then the custom keys.
    /// A body-only alert dictionary is written as a plain string.
    public var json: JSONValue {
        var members: [(key: String, value: JSONValue)] = [(key: "aps", value: aps.json)]
        for c in custom { members.append((key: c.key, value: c.value)) }
        return .object(members)
    }
}

extension APS {
    init(json: JSONValue) throws(PayloadError) {
        guard let members = json.objectValue else { throw .invalid(path: "aps", expected: "a dictionary") }
        self.init()
        for (key, value) in members {
            switch key {
            case "alert":
                switch value {
                case .string(let s): alert = .text(s)
                case .object: alert = .dictionary(try AlertDictionary(json: value))
                default: throw .invalid(path: "aps.alert", expected: "a string or a dictionary")
                }
            case "badge":
                guard let n = value.intValue, n >= 0 else {
                    throw .invalid(path: "aps.badge", expected: "a whole number ≥ 0")
                }
                badge = n
            case "sound":
                switch value {
                case .string(let s): sound = s
                case .object(let members):
                    // A critical alert's sound (ApsKeys): kept as given, among the other keys.
                    try ApsKeys.check(soundDictionary: members)
                    other.append(Payload.CustomKey(key, value))
                default: throw .invalid(path: "aps.sound", expected: "a string, or a dictionary (critical, name, volume)")
                }
            case "content-available":
                switch value.intValue {
                case 1: contentAvailable = true
                case 0: contentAvailable = false
                default: throw .invalid(path: "aps.content-available", expected: "the number 1 (or 0)")
                }
            case "category":
                guard let s = value.stringValue else { throw .invalid(path: "aps.category", expected: "a string") }
                category = s
            default:
                try ApsKeys.check(apsKey: key, value)
                other.append(Payload.CustomKey(key, value))
            }
        }
    }

    var json: JSONValue {
        var m: [(key: String, value: JSONValue)] = []
        if let alert { m.append((key: "alert", value: alert.json)) }
        if let badge { m.append((key: "badge", value: .integer(badge))) }
        if let sound { m.append((key: "sound", value: .string(sound))) }
        if contentAvailable { m.append((key: "content-available", value: 1)) }
        if let category { m.append((key: "category", value: .string(category))) }
        for o in other { m.append((key: o.key, value: o.value)) }
        return .object(m)
    }
}

extension Alert {
    var json: JSONValue {
        switch self {
        case .text(let s): .string(s)
        case .dictionary(let d) where d.isBodyOnly: .string(d.body!)
        case .dictionary(let d): d.json
        }
    }
}

extension AlertDictionary {
    init(json: JSONValue) throws(PayloadError) {
        guard let members = json.objectValue else { throw .invalid(path: "aps.alert", expected: "a dictionary") }
        self.init()
        for (key, value) in members {
            let path = "aps.alert.\(key)"
            switch key {
            case "title", "body":
                if case .object(let members) = value {
                    // The Live Activity form, `{"loc-key": …, "loc-args": […]}`: kept as given.
                    try ApsKeys.check(localizedText: members, path: path)
                    other.append(Payload.CustomKey(key, value))
                } else if key == "title" {
                    title = try Self.string(value, path)
                } else {
                    body = try Self.string(value, path)
                }
            case "title-loc-key": titleLocKey = try Self.nullable(value, path) { v throws(PayloadError) in try Self.string(v, path) }
            case "title-loc-args": titleLocArgs = try Self.nullable(value, path) { v throws(PayloadError) in try Self.strings(v, path) }
            case "action-loc-key": actionLocKey = try Self.nullable(value, path) { v throws(PayloadError) in try Self.string(v, path) }
            case "loc-key": locKey = try Self.string(value, path)
            case "loc-args": locArgs = try Self.strings(value, path)
            case "launch-image": launchImage = try Self.string(value, path)
            default:
                try ApsKeys.check(alertKey: key, value, path: path)
                other.append(Payload.CustomKey(key, value))
            }
        }
    }

    private static func string(_ v: JSONValue, _ path: String) throws(PayloadError) -> String {
        guard let s = v.stringValue else { throw .invalid(path: path, expected: "a string") }
        return s
    }

    private static func strings(_ v: JSONValue, _ path: String) throws(PayloadError) -> [String] {
        guard let a = v.arrayValue else { throw .invalid(path: path, expected: "an array of strings") }
        var out: [String] = []
        for e in a {
            guard let s = e.stringValue else { throw .invalid(path: path, expected: "an array of strings") }
            out.append(s)
        }
        return out
    }

    private static func nullable<T>(
        _ v: JSONValue, _ path: String, _ read: (JSONValue) throws(PayloadError) -> T
    ) throws(PayloadError) -> Nullable<T> {
        if case .null = v { return .null }
        return .value(try read(v))
    }

    var json: JSONValue {
        var m: [(key: String, value: JSONValue)] = []
        func put(_ k: String, _ v: JSONValue) { m.append((key: k, value: v)) }
        func strings(_ a: [String]) -> JSONValue { .array(a.map { .string($0) }) }
        if let title { put("title", .string(title)) }
        if let body { put("body", .string(body)) }
        switch titleLocKey {
        case .null?: put("title-loc-key", .null)
        case .value(let s)?: put("title-loc-key", .string(s))
        case nil: break
        }
        switch titleLocArgs {
        case .null?: put("title-loc-args", .null)
        case .value(let a)?: put("title-loc-args", strings(a))
        case nil: break
        }
        switch actionLocKey {
        case .null?: put("action-loc-key", .null)
        case .value(let s)?: put("action-loc-key", .string(s))
        case nil: break
        }
        if let locKey { put("loc-key", .string(locKey)) }
        if let locArgs { put("loc-args", strings(locArgs)) }
        if let launchImage { put("launch-image", .string(launchImage)) }
        for o in other { put(o.key, o.value) }
        return .object(m)
    }
}
