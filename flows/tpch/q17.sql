-- TPC-H Q17 (small-quantity-order revenue). Changed: comma join as JOIN ... ON.
CREATE MATERIALIZED VIEW q17 AS
SELECT sum(l_extendedprice) / 7.0 AS avg_yearly
FROM lineitem
  JOIN part ON p_partkey = l_partkey
WHERE p_brand = 'Brand#23' AND p_container = 'MED BOX'
  AND l_quantity < (SELECT 0.2 * avg(l_quantity) FROM lineitem WHERE l_partkey = p_partkey);
