-- TPC-H Q11 (important stock identification). Changed: comma joins as JOIN ... ON; no ORDER BY.
-- FRACTION is the standard's 0.0001 (it is 0.0001 / SF in the spec).
CREATE MATERIALIZED VIEW q11 AS
SELECT ps_partkey, sum(ps_supplycost * ps_availqty) AS value
FROM partsupp
  JOIN supplier ON ps_suppkey = s_suppkey
  JOIN nation ON s_nationkey = n_nationkey
WHERE n_name = 'GERMANY'
GROUP BY ps_partkey
HAVING sum(ps_supplycost * ps_availqty) > (
  SELECT sum(ps_supplycost * ps_availqty) * 0.0001
  FROM partsupp
    JOIN supplier ON ps_suppkey = s_suppkey
    JOIN nation ON s_nationkey = n_nationkey
  WHERE n_name = 'GERMANY');
