package testbed.flink.ysb;

/** One window's result: views of a campaign in the 10 s window ending at windowEnd (ms, exclusive). */
public class CampaignCount {
    public String campaignId;
    public long windowEnd;
    public long count;

    public CampaignCount() {}

    public CampaignCount(String campaignId, long windowEnd, long count) {
        this.campaignId = campaignId;
        this.windowEnd = windowEnd;
        this.count = count;
    }
}
