/// Reads the app topic (bundle id) out of a provider certificate's subject.
///
/// Apple's provider certificates say `UID=<bundle id>` and `CN=Apple Push Services: <bundle id>` in
/// their subject (Apple's guide, "Trust Components": "the topic is the bundle ID of the client app").
/// The topic is the UID when present; otherwise the CN with the "Apple Push Services: " prefix removed.
///
/// A small DER walk rather than a certificate library: it only needs the subject's attributes, and
/// the certificate has already been verified by TLS before this runs. Malformed input yields nil.
public enum CertificateTopic {
    /// OID 0.9.2342.19200300.100.1.1 (userId, "UID").
    static let uidOID: [UInt8] = [0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x01]
    /// OID 2.5.4.3 (commonName).
    static let cnOID: [UInt8] = [0x55, 0x04, 0x03]
    static let cnPrefix = "Apple Push Services: "

    public static func topic(fromDER der: [UInt8]) -> String? {
        guard let attributes = subjectAttributes(der) else { return nil }
        if let uid = attributes.first(where: { $0.oid == uidOID })?.value { return uid }
        if let cn = attributes.first(where: { $0.oid == cnOID })?.value {
            return cn.hasPrefix(cnPrefix) ? String(cn.dropFirst(cnPrefix.count)) : cn
        }
        return nil
    }

    private struct TLV {
        var tag: UInt8
        var content: Range<Int>
        var end: Int
    }

    private static func readTLV(_ b: [UInt8], at i: Int, limit: Int) -> TLV? {
        guard i + 2 <= limit else { return nil }
        let tag = b[i]
        var length = Int(b[i + 1])
        var start = i + 2
        if length & 0x80 != 0 {
            let count = length & 0x7F
            guard count >= 1, count <= 3, start + count <= limit else { return nil }
            length = 0
            for k in 0..<count { length = length << 8 | Int(b[start + k]) }
            start += count
        }
        guard start + length <= limit else { return nil }
        return TLV(tag: tag, content: start..<(start + length), end: start + length)
    }

    /// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber,
    /// signature, issuer, validity, subject, … } … }
    private static func subjectAttributes(_ b: [UInt8]) -> [(oid: [UInt8], value: String)]? {
        guard let cert = readTLV(b, at: 0, limit: b.count), cert.tag == 0x30,
            let tbs = readTLV(b, at: cert.content.lowerBound, limit: cert.end), tbs.tag == 0x30
        else { return nil }
        var i = tbs.content.lowerBound
        var fields: [TLV] = []
        while i < tbs.end, fields.count < 7, let f = readTLV(b, at: i, limit: tbs.end) {
            fields.append(f)
            i = f.end
        }
        // Skip the explicit version tag [0] when present.
        let offset = fields.first?.tag == 0xA0 ? 1 : 0
        guard fields.count > offset + 4 else { return nil }
        let subject = fields[offset + 4]
        guard subject.tag == 0x30 else { return nil }
        var out: [(oid: [UInt8], value: String)] = []
        var j = subject.content.lowerBound
        // Name ::= SEQUENCE OF RelativeDistinguishedName (SET OF AttributeTypeAndValue)
        while j < subject.end, let rdn = readTLV(b, at: j, limit: subject.end) {
            var k = rdn.content.lowerBound
            while k < rdn.end, let atv = readTLV(b, at: k, limit: rdn.end) {
                if let oid = readTLV(b, at: atv.content.lowerBound, limit: atv.end), oid.tag == 0x06,
                    let value = readTLV(b, at: oid.end, limit: atv.end)
                {
                    out.append((oid: Array(b[oid.content]), value: String(decoding: b[value.content], as: UTF8.self)))
                }
                k = atv.end
            }
            j = rdn.end
        }
        return out
    }
}
