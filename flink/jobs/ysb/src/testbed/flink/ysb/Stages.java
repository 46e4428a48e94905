package testbed.flink.ysb;

import java.util.Map;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import testbed.flink.jobs.CountingFilter;
import testbed.flink.jobs.FlatJson;
import testbed.flink.jobs.RecordCost;
import testbed.flink.jobs.WindowLedger;

/** The benchmark's stages before the window: deserialise, filter views, project, join the campaign. */
final class Stages {
    private Stages() {}

    /** JSON -> AdEvent; every event pays the record cost here (the job's per-record work). */
    static final class Parse extends RichMapFunction<String, AdEvent> {
        private static final long serialVersionUID = 1L;
        private final RecordCost cost;

        Parse(RecordCost cost) {
            this.cost = cost;
        }

        @Override
        public void open(OpenContext openContext) {
            cost.open(getRuntimeContext().getMetricGroup());
        }

        @Override
        public AdEvent map(String json) {
            Map<String, String> f = FlatJson.parse(json);
            AdEvent e = new AdEvent();
            e.userId = f.get("user_id");
            e.pageId = f.get("page_id");
            e.adId = f.get("ad_id");
            e.adType = f.get("ad_type");
            e.eventType = f.get("event_type");
            e.eventTime = Long.parseLong(f.get("event_time"));
            e.ipAddress = f.get("ip_address");
            cost.pay(e.eventTime ^ e.adId.hashCode());
            return e;
        }
    }

    /** Keeps views; what it drops is counted (gauge droppedRecords), so every event is accounted for. */
    static final class ViewFilter extends CountingFilter<AdEvent> {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean keeps(AdEvent e) {
            return "view".equals(e.eventType);
        }
    }

    /** The benchmark's projection: only the ad and the event time go on. */
    static final class Project implements MapFunction<AdEvent, ViewAd> {
        private static final long serialVersionUID = 1L;

        @Override
        public ViewAd map(AdEvent e) {
            return new ViewAd(null, e.adId, e.eventTime);
        }
    }

    /**
     * The ad's campaign from the mapping the generator made (the benchmark looks it up in Redis, the
     * Daedalus job through a cache in the job): a static map per subtask, built when it opens.
     */
    static final class CampaignJoin extends RichMapFunction<ViewAd, ViewAd> {
        private static final long serialVersionUID = 1L;
        private final AdEvents events;
        private transient Map<String, String> campaigns;

        CampaignJoin(AdEvents events) {
            this.events = events;
        }

        @Override
        public void open(OpenContext openContext) {
            campaigns = events.campaignOfAd();
        }

        @Override
        public ViewAd map(ViewAd v) {
            v.campaignId = campaigns.getOrDefault(v.adId, "UNKNOWN");
            return v;
        }
    }

    /** The results' views add up to what the windows admitted. */
    static final class Ledger extends WindowLedger<CampaignCount> {
        private static final long serialVersionUID = 1L;

        @Override
        protected long records(CampaignCount result) {
            return result.count;
        }
    }
}
