import LocalTime
import Testing

@Suite struct WallTimeTests {
    @Test func parsesHMMAndHHMM() {
        #expect(WallTime(parsing: "09:00") == WallTime(hour: 9, minute: 0))
        #expect(WallTime(parsing: "9:00") == WallTime(hour: 9, minute: 0))
        #expect(WallTime(parsing: "0:00") == WallTime(hour: 0, minute: 0))
        #expect(WallTime(parsing: "00:00")?.minuteOfDay == 0)
        #expect(WallTime(parsing: "23:59")?.minuteOfDay == 1439)
        #expect(WallTime(parsing: "22:30")?.minuteOfDay == 1350)
        // Any StringProtocol: a Substring of a larger line reads the same.
        let line = "quiet=22:00-08:00"
        #expect(WallTime(parsing: line.dropFirst(6).prefix(5)) == WallTime(hour: 22, minute: 0))
    }

    @Test(arguments: [
        "24:00", "9:5", "09:60", "", "ab:cd", " 09:00", "09:00 ", "09:00:00", "009:00", "09:000", ":00", "09:", "09", "0900",
        "-1:00", "+9:00", "09::00", "09:0a", "٠٩:٠٠", "9:5 ", "99:99",
    ])
    func refuses(_ text: String) {
        #expect(WallTime(parsing: text) == nil)
    }

    @Test func rangeOfTheMemberwiseInit() {
        #expect(WallTime(hour: 24, minute: 0) == nil)
        #expect(WallTime(hour: -1, minute: 0) == nil)
        #expect(WallTime(hour: 0, minute: 60) == nil)
        #expect(WallTime(hour: 0, minute: -1) == nil)
        #expect(WallTime(hour: 23, minute: 59)?.description == "23:59")
    }

    @Test func descriptionIsTwoDigitsEachAndReadsBack() {
        #expect(at("9:00").description == "09:00")
        #expect(at("0:05").description == "00:05")
        #expect(at("13:40").description == "13:40")
        for minute in stride(from: 0, to: 1440, by: 7) {
            let time = WallTime(hour: minute / 60, minute: minute % 60)!
            #expect(WallTime(parsing: time.description) == time)
        }
    }

    @Test func ordersByMinuteOfDay() {
        #expect(at("08:00") < at("22:00"))
        #expect(at("09:59") < at("10:00"))
        #expect(!(at("10:00") < at("10:00")))
        #expect([at("22:00"), at("00:00"), at("08:30")].sorted() == [at("00:00"), at("08:30"), at("22:00")])
    }
}
