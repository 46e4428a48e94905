package testbed.flink.ysb;

/** A parsed ad event (every field of the benchmark's JSON; event_time in ms). */
public class AdEvent {
    public String userId;
    public String pageId;
    public String adId;
    public String adType;
    public String eventType;
    public long eventTime;
    public String ipAddress;

    public AdEvent() {}
}
