-- The audit trail (GET /v1/ads/{requestId}, tracker explain) names the pattern that labelled an
-- event declared_bot, which it finds by matching the event's user agent: the report role, which
-- reads the log's client_ip and user_agent_id already, reads their texts too.
GRANT SELECT ON user_agents TO tracker_report;
