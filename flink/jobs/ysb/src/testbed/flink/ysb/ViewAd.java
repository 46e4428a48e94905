package testbed.flink.ysb;

/** A view after the projection (ad, event time) and, after the join, its campaign. */
public class ViewAd {
    public String campaignId;
    public String adId;
    public long eventTime;

    public ViewAd() {}

    public ViewAd(String campaignId, String adId, long eventTime) {
        this.campaignId = campaignId;
        this.adId = adId;
        this.eventTime = eventTime;
    }
}
